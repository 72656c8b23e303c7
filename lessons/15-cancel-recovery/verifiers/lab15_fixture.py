"""Lesson 15's lab as its checks use it (not a lesson file): the kit's view of the database, the learner's
modules (in the probe, never in this process), and the worker's deliveries and pauses (lab15_worker.py's events).
The checks judge by what these return; an assert here only stops a helper that cannot go on.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from uuid import uuid4

from shared.logs import LOG_DIR
from shared.events import read_events, short
from shared.settings import WORK
from shared.hold_gate import HoldList
from shared.i18n import t
from shared import lesson_db, scripts
from shared.lesson_db import (TERMINAL, close_open_jobs, dead_letters, event_sent, job_row, outbox_of, parked,
                              result_file, set_ago, sql, wait_status)
from shared.probe import Probe
from shared.proc import WaitTimeout, wait_until

GATE = HoldList(LOG_DIR, "lab15")  # lab15_worker's gates (phases claim and write), and its events


# ---------------------------------------------------------------- the kit's own view of the database

def unsent(job_id: str) -> list[dict]:
    """The job's outbox events not sent yet, oldest first."""
    return outbox_of(job_id, unsent_only=True)


def outbox_row(event_id: str) -> dict:
    return sql("SELECT sent_at, claim_token FROM export_outbox WHERE id=%s", (event_id,))[0]


def dead_letter(job_id: str) -> dict | None:
    return next(iter(dead_letters(job_id, "job_id, reason, quarantined_at")), None)


def submitted(st, jobs: list[str], product_ids: list[int]) -> str:
    """A new job, kept in `jobs` (the check retires them at its end)."""
    job_id = st.submit_snapshot(product_ids)
    jobs.append(job_id)
    return job_id


def expire_lease(job_id: str) -> None:
    lesson_db.expire_lease(job_id, running_only=True)


def make_due(job_id: str) -> None:
    set_ago("export_jobs", "id", [job_id], 1, "next_attempt_at")


def files_of(job_id: str) -> list[Path]:
    folder = WORK / "artifacts"
    return sorted(folder.glob(f"*{job_id}*")) if folder.is_dir() else []


def published_as(row: dict, snapshot, message: str) -> Path:
    """The job's result file; asserts (with `message`) that it holds `snapshot`'s rows, in any order."""
    path, written = result_file(row)
    try:
        same = sorted(json.dumps(r, sort_keys=True, default=str) for r in written) == \
            sorted(json.dumps(r, sort_keys=True, default=str) for r in snapshot)
    except TypeError:
        same = False
    assert same, message
    return path


def retire(job_ids: list[str]) -> None:
    """A check's leftovers end here: unsent events marked sent, open jobs closed (never a later check's)."""
    close_open_jobs(job_ids, "status='cancelled', error_code='lab_retired', lease_token=NULL, lease_until=NULL")


def remove_jobs(jobs) -> None:
    """The kit's cleanup: the rows a check created (events, dead letters, jobs), in foreign-key order."""
    lesson_db.remove_jobs(jobs, tables=("export_outbox", "export_dead_letters"))


# ---------------------------------------------------------------- the learner's modules (in the probe)

learner = Probe()  # the learner's modules load there, never in this process (the judge)


def store(*extra: str):
    return learner.module("state_store", "transaction", "submit_snapshot", "claim", "finish", *extra)


def recovery():
    return learner.module("recovery", "recover_batch")


def publisher():
    return learner.module("publisher", "claim_event", "publish_one")


def celery_app():
    """The learner's app.send_task(name, args, task_id, queue, ignore_result), run in the probe."""
    learner.module("celery_app")
    assert learner.call("lab15_learner:has_app") is True, t("celery_app.py has no app")
    return functools.partial(learner.call, "lab15_learner:send_task")


def scan(rec) -> int:
    count = rec.recover_batch()
    assert isinstance(count, int), t("recover_batch() should return how many jobs it changed, got {count!r}",
                                     count=count)
    return count


def run_script(args: list[str], env: dict | None = None):
    """`python ARGS` in the work folder: exit code, output (secrets masked), its lines cut to 200 characters."""
    script = scripts.run_script(args, 40, env=env)
    return script.code, script.output, [line[:200] for line in script.lines]


# ---------------------------------------------------------------- the worker, its deliveries and pauses

events = functools.partial(read_events, GATE.events)  # the probe's events (with these fields)


def worker_event(kind: str, **fields) -> dict | None:
    """The worker's first event of this kind ("hold", "end", ...) with these fields."""
    return next(iter(events(kind=kind, **fields)), None)


def wait_hold(phase: str, job_id: str, seconds: float = 20) -> dict:
    where = t("after its claim") if phase == "claim" else t(
        "at the file write (the path must hold the job_id, e.g. artifacts/<job_id>.<token>.json)")
    return GATE.wait_held([job_id], seconds, f"the worker's hold of {job_id}", phase, 0.02, late=lambda: t(
        "within {seconds:g}s the worker never paused job {job_id} {where} (see the worker log)", seconds=seconds,
        job_id=short(job_id), where=where))


def wait_end(task_id: str, seconds: float = 20) -> dict:
    try:
        return wait_until(lambda: worker_event("end", task_id=task_id), seconds, f"the worker's end of {task_id}")
    except WaitTimeout:
        raise AssertionError(t("the worker did not finish message {task_id} within {seconds:g}s (see the worker log)",
                               task_id=short(task_id), seconds=seconds)) from None


def shown(end: dict) -> str:
    """A task's return value for a note, without the job id it repeats."""
    value = end.get("retval")
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "job_id"}
    return json.dumps(value, default=str)[:80]


def send(app, job_id: str, queue: str = "exports.fast") -> str:
    """A message for this job, straight to the broker (a duplicate, as far as the job is concerned)."""
    task_id = str(uuid4())
    app("products.export", [job_id], task_id, queue, True)
    return task_id


def run_published(c, pub, app, job_id: str, event_id: str, seconds: float = 20) -> dict:
    """Publish this event and wait for the job to end.  A claim that lands while the confirm locks the job
    row skips it (SKIP LOCKED) and acks the message; one duplicate stands in for the scan's re-dispatch."""
    publish_event(pub, event_id)
    wait_end(event_id, seconds)
    row = job_row(job_id)
    if row["status"] == "queued":
        c.note(t("(this delivery met the publisher's confirm holding the job row, so SKIP LOCKED skipped it; one "
                 "duplicate message stands in for the scan's re-dispatch)"))
        wait_end(send(app, job_id, queue="exports.bulk"), seconds)
    return wait_status(job_id, TERMINAL, seconds)


def publish_event(pub, event_id: str, tries: int = 3) -> bool:
    """publish_one() (the learner's, in the probe) until our event is sent; the last return value."""
    result = False
    with parked({event_id}):
        for _ in range(tries):
            result = pub.publish_one()
            if event_sent(event_id):
                return result
    raise AssertionError(t("event {event_id} still unsent after {tries} publish_one() calls (last returned "
                           "{result!r})", event_id=short(event_id), tries=tries, result=result))


def explained():
    """The one known server mismatch as a pointer to lesson 11's guide instead of a bare traceback."""
    return lesson_db.explained(t("the server is MariaDB, which has no max_execution_time: change that line in "
                                 "connect() to SET SESSION max_statement_time = 3 (lesson 11's guide)"))
