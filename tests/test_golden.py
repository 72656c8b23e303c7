"""Golden files for what the kit writes (issue 38, item 6): one run's results in (tests/golden/run/input.json),
and out the results JSON, the JUnit XML and the terminal text in both languages, compared byte for byte with
the expected.* files beside it -- files a reviewer can read.  A change to any of them shows up here as a
diff to review: LAB_GOLDEN_UPDATE=1 rewrites them, then `git diff tests/golden` is what changed for a reader.
Nothing is run, no server is started; texts and hints come from the real tasks.json."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from checks import console, report
from checks.results import LessonResult, new_result
from shared import manifest

GOLDEN = Path(__file__).parent / "golden" / "run"
UPDATE = os.environ.get("LAB_GOLDEN_UPDATE") == "1"


def results() -> tuple[str, list[LessonResult]]:
    spec = json.loads((GOLDEN / "input.json").read_text(encoding="utf-8"))
    lessons = []
    for entry in spec["lessons"]:
        checks = []
        for cid, fields in entry["checks"].items():
            owner = manifest.lesson(cid.split(".")[0])
            check = next(c for c in owner["checks"] if c["id"] == cid)
            result = new_result(owner["id"], check, regression=fields.get("regression", False))
            result.status, result.seconds = fields["status"], fields["seconds"]
            result.message, result.notes = fields.get("message", ""), fields.get("notes", [])
            checks.append(result)
        lessons.append(LessonResult(manifest.lesson(entry["id"]), spec["source"], checks, entry["seconds"],
                                    notices=entry.get("notices", [])))
    return spec["source"], lessons


def same_as_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    assert path.read_text(encoding="utf-8") == text, (
        f"{name} is not what the kit writes now: if the change is meant, run LAB_GOLDEN_UPDATE=1 make test and "
        f"review `git diff tests/golden`")


def test_results_json():
    source, lessons = results()
    data = report.to_dict(lessons, source)
    data["created_at"] = "<when the run ended>"
    same_as_golden("expected.results.json", json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def test_junit_xml(tmp_path):
    source, lessons = results()
    report.write_junit(tmp_path / "r.xml", lessons, source)
    same_as_golden("expected.junit.xml", (tmp_path / "r.xml").read_text(encoding="utf-8") + "\n")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_terminal_text(lang, monkeypatch):
    monkeypatch.setenv("LAB_LANG", lang)
    _, lessons = results()
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        for lesson in lessons:
            console.print_lesson(lesson)
        console.print_total(lessons)
    same_as_golden(f"expected.terminal.{lang}.txt", shown.getvalue())
