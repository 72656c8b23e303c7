"""Lessons 08–16 as a learner meets them: an exercise answered correctly under a name of the learner's own
choosing is judged by what it does (the course names the task, not the function)."""

from __future__ import annotations

from pathlib import Path

from checks.results import PASS, SKIPPED
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest

DATA = manifest.load()


def _run_11_10(tmp_path: Path, old: str, new: str):
    lesson = manifest.lesson("11", DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    path = work / "state_store.py"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    result = run_lesson(lesson, work, tmp_path / "logs", only={"11.10"})
    return next(c for c in result.checks if c.id == "11.10")


def test_the_renewal_is_found_by_what_it_is_not_by_its_name(tmp_path):
    check = _run_11_10(tmp_path, "def renew_lease(", "def keep_alive(")
    assert check.status == PASS, (check.message, check.notes)
    assert any("keep_alive" in note for note in check.notes)


def test_no_renewal_is_an_exercise_not_attempted(tmp_path):
    check = _run_11_10(tmp_path, "def renew_lease(job_id: str, token: str)", "def _not_here(job_id: str, token: str)")
    assert check.status == SKIPPED, (check.status, check.message)
