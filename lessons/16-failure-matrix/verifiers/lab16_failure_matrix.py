"""Lesson 16's failure matrix, automated (kit script, not a lesson file).

    python lab16_failure_matrix.py [case …]     in a work dir made by the checker (it needs .env.tasks)

Each of the 15 rows of failure-matrix.md runs on a job of its own, created inside the row, and
injects exactly one fault:

    baseline   the previous row is over: no fault in place, broker up, nothing due, worker idle
    inject     one fault (recorded once; a row that tries a second one fails)
    recover    the component is restored and the learner's publisher/recovery/worker do the rest

The row's evidence is what the kit read, never what it expected: the job's committed state changes
(a kit trigger writes each one inside the changing transaction), the deliveries the worker really ran
and how each ended (lab16_probe), attempts, result_ref and the artifact's sha256, the recovery time,
and every re-dispatch the system's unclaimed recovery made, with the fact that allowed it.  Durable
times that can be set are moved into the past instead of waited for; the seconds moved are added to
the measured wall time, so recovery_seconds is what a real clock would have shown.  Rows not run are
written as not_run; a row that raised or whose claim did not hold is fail.  The record goes to
$TASKLAB_LOG_DIR/verification-record.json.

Everything runs against the learner's code: state_store, publisher.publish_one, recovery.recover_batch,
schedule_store.schedule_once, schedule_tasks.execution_slot, admission_adapter.accept_export,
api_db (when present) and the export task in a real Celery worker.

The parts: lab16_fixture (broker, workers, the kit's view of the database and the worker),
lab16_row (one row and the drivers that move a job along), lab16_cases (the 15 rows' catalogue and the
runner of one row), lab16_drills_execution and lab16_drills_dispatch (the rows' drills, 1-8 and 9-15),
lab16_record (the record's rules, shared with 16.1, and its writer), lab16_evidence (is a record backed by
the database and the deliveries: 16.1 and 16.8), lab16_probe (inside the worker), lab16_cache_publisher (the
result-cache row's publisher process) and lab16_publishing (the kit's publishes, which claims wait for).
"""

from __future__ import annotations

import sys

from lab16_cases import CASE_IDS, CASES, run_case
from lab16_fixture import Lab
from lab16_record import RECORD, build_record, write_record
from lab16_row import LEASE_BUDGET, MAX_REDISPATCHES, QUEUED_BUDGET, SCAN_PERIOD

from shared.lesson_celery import short


class Matrix:
    """The rows run so far on one Lab.  Each row runs at most once; the record is rewritten after every
    batch, so it always shows every row run so far and the others as not_run."""

    def __init__(self, lab: Lab):
        self.lab = lab
        self.rows: dict[str, dict] = {}

    def run(self, case_ids=None) -> dict:
        """Run the named rows not run yet (default: all 15), in catalogue order; the record."""
        for case in CASES:
            if (case_ids is None or case.id in case_ids) and case.id not in self.rows:
                self.rows[case.id] = run_case(case, self.lab)
        record = self.record()
        write_record(record)
        return record

    def record(self) -> dict:
        return build_record(CASES, self.rows, self.lab.broker, {
            "scan_period_seconds": SCAN_PERIOD,
            "budgets_seconds": {"expired_lease": LEASE_BUDGET, "sent_not_claimed": QUEUED_BUDGET},
            "max_redispatches_per_job": MAX_REDISPATCHES,
            "lab_setup_seconds": round(self.lab.setup_seconds, 3),
        })


def run_matrix(case_ids=None) -> dict:
    """A lab of its own, the named rows (default: all 15), the record."""
    lab = Lab(cache_worker=case_ids is None or "result_cache_expired" in case_ids)
    try:
        lab.start()
        return Matrix(lab).run(case_ids)
    finally:
        lab.stop()


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
