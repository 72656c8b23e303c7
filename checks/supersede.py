"""Which checks a run of a lesson owes: the earlier lessons' checks it re-runs (regressions), and the checks
whose subject a later lesson the folder has reached replaced (superseded: reported, not run, not counted)."""

from __future__ import annotations

from checks.results import SUPERSEDED, CheckResult
from shared.i18n import t
from shared.manifest import load


def regressions_of(lesson: dict, lessons: list[dict] | None = None) -> dict[str, list[dict]]:
    """Earlier lesson id -> the checks of it that lesson NN re-runs as regressions (tasks.json's
    `regressions`: checks of code an earlier lesson built that NN rewrites or still relies on)."""
    wanted = lesson.get("regressions") or []
    if not wanted:
        return {}
    if lessons is None:
        lessons = load()["lessons"]
    found: dict[str, list[dict]] = {}
    for earlier in lessons:
        for check in earlier["checks"]:
            if check["id"] in wanted:
                found.setdefault(earlier["id"], []).append(check)
    return found


def lesson_by_id(lesson_id: str, lessons: list[dict] | None) -> dict:
    if lessons is None:
        lessons = load()["lessons"]
    return next(lesson for lesson in lessons if lesson["id"] == lesson_id)


def superseded(results: list[CheckResult], lesson: dict, lessons: list[dict] | None, upto: str) -> dict[str, str]:
    """Check id -> the lesson that replaced its subject, for the checks a folder at lesson `upto` has moved
    past (tasks.json's superseded_by)."""
    by_id = {c["id"]: c for c in lesson["checks"]}
    return {r.id: by_id[r.id]["superseded_by"] for r in results
            if by_id.get(r.id, {}).get("superseded_by") and by_id[r.id]["superseded_by"] <= upto}


def checks_to_run(only: set[str] | None, results: list[CheckResult], gone: dict[str, str]) -> set[str] | None:
    """The checks to run: `only` (or all of these) minus the superseded ones."""
    if not gone:
        return only
    wanted = only if only is not None else {r.id for r in results}
    return wanted - set(gone)


def mark_superseded(results: list[CheckResult], gone: dict[str, str]) -> None:
    for r in results:
        if r.id in gone:
            r.status = SUPERSEDED
            r.message = t("lesson {gone} replaced what this checks, and your folder has reached it: not counted",
                          gone=gone[r.id])
