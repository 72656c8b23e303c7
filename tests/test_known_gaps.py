"""The curriculum's two known gaps stay failing, and the failure explains itself in one read.

12.4 with the course's outbox index and 15.4 with the course's recovery scan: the first claimer locks every
candidate, so the second gets nothing.  A learner who typed the course exactly must see that the index (or
scan) is the cause, not their typing: the message gives the rows the first claimer held, the EXPLAIN line
(Using filesort), the index, and the exact index / query to write instead.  The mutants reproduce the
course's text (tests/mutants/lesson12.py, lesson15.py); test_curriculum_lab.py checks the course itself.
"""

import pytest

from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests.mutants import all_mutants

DATA = manifest.load()

CASES = {
    "12-outbox-index-not-matching-order": ("12.4", [
        "held 1000 of the 1000 pending events locked",
        "Using filesort",
        "export_outbox_pending (sent_at, available_at, created_at)",
        "the index the course text gives",
        "not your typing",
        "KEY export_outbox_pending (sent_at, created_at, id)",
        "ALTER TABLE export_outbox DROP INDEX export_outbox_pending, ADD KEY export_outbox_pending "
        "(sent_at, created_at, id);",
    ]),
    "15-recovery-scan-as-in-the-course": ("15.4", [
        "held 120 of the 120 overdue jobs locked",
        "Using filesort",
        "the course's scan, not your typing",
        "FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)",
        "ORDER BY j.status, j.updated_at, j.id",
    ]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_known_gap_names_its_cause(name, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    mutant = next(m for m in all_mutants() if m.name == name)
    check_id, needles = CASES[name]
    lesson = manifest.lesson(mutant.lesson, DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    mutant.apply(work)
    result = run_lesson(lesson, work, tmp_path / "logs", only={check_id})
    check = next(c for c in result.checks if c.id == check_id)
    assert check.status == "fail", (check.status, check.message)
    missing = [needle for needle in needles if needle not in check.message]
    assert not missing, f"missing {missing} in: {check.message}"
