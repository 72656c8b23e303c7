"""Lesson 16's failure-matrix catalogue (kit module, not a lesson file): the 15 rows of failure-matrix.md
(Case: id, drill, fault point, operation, expected result) and the runner of one row, baseline → inject →
recover, into a record row (lab16_record's rules).

The drills (lab16_drills_execution, rows 1-8; lab16_drills_dispatch, rows 9-15) each run on a job of their
own, created inside the row, and inject exactly one fault through Row.fault.  A row's verdict rests on facts —
database rows, the job's committed changes, the deliveries the worker ran and how each ended, HTTP answers,
process ids; a row that raised or whose claim did not hold is fail.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections import namedtuple

from lab16_drills_dispatch import (case_backoff_duplicates, case_cross_minute, case_fail_before_claim,
                                   case_pending_rescan, case_queue_full, case_same_slot, case_sent_unclaimed)
from lab16_drills_execution import (case_broker_down, case_cancel, case_commit_fault, case_exhausted,
                                    case_publish_before_mark, case_result_cache, case_stale_token, case_worker_exit)
from lab16_fixture import (FAIL_LIST, GATE, artifact_evidence, deliveries, drop_kit_triggers,
                           due_events, park)
from lab16_record import empty_row, now_iso
from lab16_row import Row

from shared.settings import redact
from shared.i18n import t
from shared.lesson_db import active_jobs, job_row, sql


# ================================================================ the catalogue

# A row of the matrix: its place (each row exports a product of its own), id, drill, and its texts -- fault
# point, operation, expected result -- made in the learner's language when asked (texts()).
Case = namedtuple("Case", "index id run texts")

CASES = [Case(index, *row) for index, row in enumerate([
    ("commit_fault_rollback", case_commit_fault, lambda: (
        t("before the DB commit"), t("this submit raises before commit"), t("job and outbox roll back together"))),
    ("broker_unavailable", case_broker_down, lambda: (
        t("broker unavailable"), t("submit with the private Redis stopped"), t("job and outbox kept, sent_at NULL"))),
    ("publish_after_send_before_mark", case_publish_before_mark, lambda: (
        t("published, not marked sent"), t("lose one confirm write"),
        t("published again; the result stays CAS-protected"))),
    ("worker_exit_with_lease", case_worker_exit, lambda: (
        t("worker exits holding the lease"), t("SIGKILL this job's pool process"),
        t("recovered after expiry, attempts up"))),
    ("stale_token_late_finish", case_stale_token, lambda: (
        t("old token arrives late"), t("finish with the old token after a new claim"),
        t("finish=False, result_ref untouched"))),
    ("cancel_requested", case_cancel, lambda: (
        t("cancel"), t("set cancel_requested mid-run"), t("ends cancelled, no success published"))),
    ("attempts_exhausted", case_exhausted, lambda: (
        t("attempts exhausted"), t("three claims all expire"), t("failed with a dead letter, no fourth claim"))),
    ("result_cache_expired", case_result_cache, lambda: (
        t("result cache expired"), t("shorten result_expires"), t("the MySQL state still answers"))),
    ("queue_full", case_queue_full, lambda: (
        t("queue full"), t("concurrent submits with little room left"), t("503, no false 202"))),
    ("same_slot_concurrent", case_same_slot, lambda: (
        t("same slot twice"), t("same slot scheduled concurrently"), t("one scheduled job only"))),
    ("cross_minute_redelivery", case_cross_minute, lambda: (
        t("schedule redelivered across minutes"), t("one simulated signal, two execution minutes"),
        t("this model creates two slots"))),
    ("sent_not_claimed", case_sent_unclaimed, lambda: (
        t("sent but never claimed"), t("marked sent, never sent, past the threshold"),
        t("the scan adds an event; the job completes"))),
    ("fail_before_claim", case_fail_before_claim, lambda: (
        t("failure before claim"), t("the worker's DB connection fails before claim"),
        t("the queued path dispatches again"))),
    ("duplicate_during_backoff", case_backoff_duplicates, lambda: (
        t("duplicates during backoff"), t("duplicates and claims while next_attempt_at is ahead"),
        t("all None, attempts unchanged"))),
    ("pending_event_rescan", case_pending_rescan, lambda: (
        t("pending event still there"), t("scan one queued job repeatedly"),
        t("no extra recovery event while one is pending"))),
])]
CASE_IDS = [c.id for c in CASES]


# ================================================================ one row, start to end

def baseline(stack, row: Row) -> None:
    """Before a row: no kit fault left in place, broker answering, worker alive and idle, nothing due."""
    drop_kit_triggers()
    for path in (GATE.path, FAIL_LIST):
        path.unlink(missing_ok=True)
    if stack.private and not stack.broker_ping():
        stack.broker_start()
    assert stack.worker is not None and stack.worker.alive(), t("the matrix worker has exited; see lab16-worker.log")
    stack.drain()
    row.known = {r["id"] for r in sql("SELECT id FROM export_jobs")}
    row.baseline = {"broker": "PONG" if (not stack.private or stack.broker_ping()) else "down",
                    "due_events": due_events(), "active_jobs": active_jobs(), "worker_pid": stack.worker.pid}
    row.phases["baseline"] = now_iso()


def restore(stack, row: Row, failed: bool) -> None:
    """After a row, whatever happened: faults removed, held jobs released, a failed row's jobs parked."""
    with contextlib.suppress(Exception):
        drop_kit_triggers()
    for job in row.jobs:
        with contextlib.suppress(OSError):
            GATE.release(job)
    for path in (GATE.path, FAIL_LIST):
        path.unlink(missing_ok=True)
    if stack.private and not stack.broker_ping():
        with contextlib.suppress(Exception):
            stack.broker_start()
    if failed:
        with contextlib.suppress(Exception):
            park(row.jobs)


def run_case(case: Case, stack) -> dict:
    started = time.monotonic()
    row = Row(case, stack)
    out = empty_row(case)
    failed = True
    try:
        baseline(stack, row)
        case.run(row, stack)
        assert len(row.faults) == 1, t("this row injected no fault")
        assert row.recovery_seconds is not None, t("this row recorded no recovery")
        failed = False
    except AssertionError as exc:
        out["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a row that raised is a failed row, with why
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-2:]
        out["error"] = redact(f"{type(exc).__name__}: {exc} | {''.join(tail).strip()[-300:]}")
    finally:
        restore(stack, row, failed)
    main = row.jobs[0] if row.jobs else None
    final = job_row(main) if main else None
    delivered = deliveries(main) if main else []
    changes = row.transitions()
    out.update({
        "job_id": main, "job_ids": row.jobs, "operated_at": row.phases.get("inject"), "phases": row.phases,
        "fault": row.faults[0] if row.faults else None, "faults_injected": len(row.faults),
        "baseline": row.baseline, "observed_states": row.observed_states(changes), "transitions": changes,
        "message_ids": sorted({d["task_id"] for d in delivered}), "deliveries": len(delivered),
        "attempts": final and final["attempts"], "final_status": final and final["status"],
        "result_ref": final and final["result_ref"],
        "recovery_seconds": row.recovery_seconds, "measured_seconds": row.measured_seconds,
        "time_moved_seconds": round(row.skipped, 3), "setup_time_moved_seconds": round(row.setup_moved, 3),
        "redispatches": row.redispatches, "notes": row.notes, **row.extra,
    })
    if final is not None:
        out["duplicate_deliveries"] = max(0, len(delivered) - int(final["attempts"]))
        if final["status"] == "succeeded":
            try:
                out["artifact_sha256"], out["artifact"] = artifact_evidence(final)
            except AssertionError as exc:
                failed = True
                out["error"] = str(exc)
    if "budget_seconds" in out and out.get("recovery_seconds") is not None:
        out["within_budget"] = out["recovery_seconds"] <= out["budget_seconds"]
    out["result"] = "fail" if failed else "pass"
    out["row_seconds"] = round(time.monotonic() - started, 3)
    return out
