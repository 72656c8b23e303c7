"""Lesson 16's failure matrix, automated (kit script, not a lesson file).

    python lab16_failure_matrix.py [case …]     in a work dir made by the checker (it needs .env.tasks)

Runs the rows of failure-matrix.md (lab16_cases: baseline, one fault, recover) on one stack (lab16_fixture)
and writes $TASKLAB_LOG_DIR/verification-record.json (lab16_record), the rows not run as not_run.  Durable
times are moved into the past instead of waited for, and the seconds moved are added to the measured wall
time, so recovery_seconds is what a real clock would have shown.
"""

from __future__ import annotations

import sys

from lab16_cases import CASE_IDS, CASES, run_case
from lab16_fixture import Stack
from lab16_record import RECORD, build_record, write_record
from lab16_row import LEASE_BUDGET, MAX_REDISPATCHES, QUEUED_BUDGET, SCAN_PERIOD

from shared.events import short


class Matrix:
    """The rows run so far on one Stack, each at most once; the record is rewritten after every batch."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.rows: dict[str, dict] = {}

    def run(self, case_ids=None) -> dict:
        """Run the named rows not run yet (default: all 15), in catalogue order; the record."""
        for case in CASES:
            if (case_ids is None or case.id in case_ids) and case.id not in self.rows:
                self.rows[case.id] = run_case(case, self.stack)
        record = self.record()
        write_record(record)
        return record

    def record(self) -> dict:
        return build_record(CASES, self.rows, self.stack.broker, {
            "scan_period_seconds": SCAN_PERIOD,
            "budgets_seconds": {"expired_lease": LEASE_BUDGET, "sent_not_claimed": QUEUED_BUDGET},
            "max_redispatches_per_job": MAX_REDISPATCHES,
            "lab_setup_seconds": round(self.stack.setup_seconds, 3),
        })


def run_matrix(case_ids=None) -> dict:
    """A stack of its own, the named rows (default: all 15), the record."""
    stack = Stack(cache_worker=case_ids is None or "result_cache_expired" in case_ids)
    try:
        stack.start()
        return Matrix(stack).run(case_ids)
    finally:
        stack.stop()


if __name__ == "__main__":
    wanted = sys.argv[1:] or None
    unknown = sorted(set(wanted or []) - set(CASE_IDS))
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASE_IDS)}")
    result = run_matrix(wanted)
    for row in result["cases"]:
        print(f"{row['result']:8} {row['case']:32} job {row['job_id'] and short(row['job_id'])} "
              f"recovery {row['recovery_seconds']}s redispatches {len(row.get('redispatches') or [])} "
              f"{row.get('error', '')[:160]}")
    print("record:", RECORD)
