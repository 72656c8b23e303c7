"""Grading at the end of a course gives the marks earned.

A folder that has moved on to lesson 16 is graded for every earlier lesson with its whole schema; the
checks whose subject a later lesson replaced (tasks.json `superseded_by`) are shown as superseded and not
counted; every other check — own and regression — must pass.  The reference after lesson 16 stands in for
a learner who finished the course.  `make test` grades a rotating two of the lessons 08–15 (those with
superseded checks among them); `make test-all` (LAB_TEST_ALL=1) grades all fifteen.
"""

import shutil
from pathlib import Path

import pytest

from checks import report, session
from checks.results import PASS, SUPERSEDED
from checks.workdir import reference_files
from shared import manifest
from tests.daily import EVERYTHING, today

DATA = manifest.load()
EARLIER = [lesson for lesson in DATA["lessons"] if lesson["id"] < "16"]


def _chosen() -> list[dict]:
    if EVERYTHING:
        return EARLIER
    later = [lesson for lesson in EARLIER if lesson["id"] >= "08"]
    return [later[today() % len(later)], later[(today() + 3) % len(later)]]


def _finished_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks_lab"
    for rel, src in reference_files(DATA["lessons"], "16").items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, folder / rel)
    return folder


def test_the_manifest_says_what_supersedes_what():
    superseded = {c["id"]: c["superseded_by"] for lesson in DATA["lessons"] for c in lesson["checks"]
                  if c.get("superseded_by")}
    assert superseded, "tasks.json names no superseded check"
    for lesson in DATA["lessons"]:
        for rid in lesson.get("regressions", []):  # a regression must still apply to the lesson re-running it
            assert superseded.get(rid, "99") > lesson["id"], f"lesson {lesson['id']} re-runs {rid}, superseded earlier"


@pytest.mark.parametrize("lesson", _chosen(), ids=lambda lesson: lesson["id"])
def test_a_finished_folder_earns_every_counted_mark(lesson, tmp_path, monkeypatch):
    monkeypatch.setattr(session, "STATE_DIR", tmp_path / "home")
    folder = _finished_folder(tmp_path)
    [result] = session.run_many([lesson], DATA, folder, "finished")
    wrong = [(c.id, c.status, c.message) for c in result.checks if c.counted and c.status != PASS]
    assert not wrong, wrong
    expected = {c["id"] for c in lesson["checks"] if c.get("superseded_by")}
    assert {c.id for c in result.checks if c.status == SUPERSEDED and not c.regression} == expected
    m = report.marks(result.checks)
    assert m["score"] == m["max_score"]
