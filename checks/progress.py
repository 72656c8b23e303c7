"""Remember the last result of each lesson in .lab/progress.json, for `list`."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from checks.runner import LessonResult
from checks.workdir import LAB_DIR

PROGRESS = LAB_DIR / "progress.json"


def load() -> dict:
    try:
        return json.loads(PROGRESS.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}  # no runs yet, or a damaged file: progress is a convenience, never a blocker


def record(results: list[LessonResult]) -> None:
    data = load()
    for result in results:
        data[result.lesson["id"]] = {
            "status": result.status,
            "passed": sum(c.status == "pass" for c in result.checks),
            "total": len(result.checks),
            "source": result.source,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    PROGRESS.parent.mkdir(parents=True, exist_ok=True)
    tmp = PROGRESS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(PROGRESS)
