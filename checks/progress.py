"""What the kit remembers between runs, under .state/ (LAB_HOME): the learner's folder, and the last
result of each lesson — the kit's reference and the learner's folder kept apart, for `list` and for
choosing the next lesson."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from checks.report import count_checks
from checks.results import LessonResult
from checks.workdir import STATE_DIR

PROGRESS = STATE_DIR / "progress.json"
REFERENCE = "reference"


def _read() -> dict:
    try:
        data = json.loads(PROGRESS.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}  # no runs yet, or a damaged file: progress is a convenience, never a blocker
    if not isinstance(data, dict) or ("results" not in data and data):
        return {}  # an older layout: start afresh rather than mix reference and learner results
    return data


def _write(data: dict) -> None:
    PROGRESS.parent.mkdir(parents=True, exist_ok=True)
    tmp = PROGRESS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(PROGRESS)


def load(source: str = REFERENCE) -> dict:
    """Lesson id -> last result, for the reference or for one learner folder (its resolved path)."""
    return _read().get("results", {}).get(source, {})


def record(results: list[LessonResult]) -> None:
    data = _read()
    data.setdefault("results", {})
    for result in results:
        n = count_checks(result.checks)
        data["results"].setdefault(result.source, {})[result.lesson["id"]] = {
            "status": result.status,
            # passed of the checks that ran (own and regressions): what was skipped is in neither
            "passed": n["passed"] + n["regressions_passed"],
            "total": n["passed"] + n["failed"] + n["regressions"],
            "counts": n,  # what make list shows, in the run's own words
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    _write(data)


def learner_folder() -> Path | None:
    raw = _read().get("learner_folder")
    return Path(raw) if raw else None


def remember_folder(folder: Path | None) -> None:
    data = _read()
    data.setdefault("results", {})
    if folder is None:
        data.pop("learner_folder", None)
    else:
        data["learner_folder"] = str(folder)
    _write(data)
