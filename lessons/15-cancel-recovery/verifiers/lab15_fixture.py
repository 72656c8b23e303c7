"""Lesson 15's lab as its checks use it (not a lesson file): the kit's own view of the database (events,
dead letters, times moved with UPDATEs, a check's jobs retired or removed), the learner's modules (loaded in
the probe, shared/probe.py and lab15_learner.py, never in this process), and the worker's deliveries and
pauses as lab15_probe.py records them.

The checks (lab15_verify.py, lab15_delivery.py) judge by what these return; an assert here only stops a
helper that cannot go on (a pause that never came, a message the worker never finished).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from uuid import uuid4

import pymysql

from shared.lesson_celery import LOG_DIR, WORK, read_events, redact, short
from shared.i18n import t
from shared import lesson_db
from shared.lesson_db import job_row, kit_db, sql, wait_status
from shared.probe import Probe
from shared.proc import WaitTimeout, run_python, wait_until

EVENTS = LOG_DIR / "lab15-events.jsonl"
HOLD_LIST = LOG_DIR / "lab15-hold.txt"
TERMINAL = ("succeeded", "failed", "cancelled")
UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


# ---------------------------------------------------------------- the kit's own view of the database

def events_of(job_id: str) -> list[dict]:
    return sql("SELECT id, queue_name, available_at, sent_at, claim_token, claim_until, created_at, NOW(6) AS now "
               "FROM export_outbox WHERE job_id=%s ORDER BY created_at, id", (job_id,))


def unsent(job_id: str) -> list[dict]:
    return [e for e in events_of(job_id) if e["sent_at"] is None]


def dead_letter(job_id: str) -> dict | None:
    rows = sql("SELECT job_id, reason, quarantined_at FROM export_dead_letters WHERE job_id=%s", (job_id,))
    return rows[0] if rows else None


def payload_of(row: dict):
    value = row["payload"]
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def seconds_between(later, earlier) -> float:
    return (later - earlier).total_seconds()


def server_now():
    return sql("SELECT NOW(6) AS now")[0]["now"]


def expire_lease(job_id: str) -> None:
    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s AND status='running'",
        (job_id,))


def make_due(job_id: str) -> None:
    sql("UPDATE export_jobs SET next_attempt_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))


def cancel(job_id: str) -> int:
    """The cancel request exactly as the lesson writes it (schema_recovery.sql); the rows it changed."""
    with kit_db() as cur:
        return cur.execute("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                           "WHERE id=%s AND status IN ('queued','running')", (job_id,))


def files_of(job_id: str) -> list[Path]:
    folder = WORK / "artifacts"
    return sorted(folder.glob(f"*{job_id}*")) if folder.is_dir() else []


def published_payload(row: dict):
    ref = row.get("result_ref")
    assert ref, t("the job succeeded but result_ref is empty")
    path = Path(ref) if Path(ref).is_absolute() else WORK / ref
    assert path.is_file(), t("result_ref points to no file: {ref}", ref=ref)
    return path, json.loads(path.read_text(encoding="utf-8"))


def same_rows(got, expected) -> bool:
    def key(rows):
        return sorted((json.dumps(r, sort_keys=True, default=str) for r in rows))
    try:
        return key(got) == key(expected)
    except TypeError:
        return False


def retire(job_ids: list[str]) -> None:
    """A check's leftovers end here: unsent events marked sent, open jobs closed (never a later check's)."""
    if not job_ids:
        return
    marks = ",".join(["%s"] * len(job_ids))
    with kit_db() as cur:
        cur.execute(f"UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL "
                    f"WHERE job_id IN ({marks}) AND sent_at IS NULL", job_ids)
        cur.execute(f"UPDATE export_jobs SET status='cancelled', error_code='lab_retired', lease_token=NULL, "
                    f"lease_until=NULL WHERE id IN ({marks}) AND status IN ('queued','running')", job_ids)


def remove_jobs(jobs) -> None:
    """The kit's cleanup: the rows a check created (events, dead letters, jobs), in foreign-key order."""
    lesson_db.remove_jobs(jobs, tables=("export_outbox", "export_dead_letters"))


@contextlib.contextmanager
def parked(keep: set[str]):
    """Other due events are pushed a day ahead for a moment, so a publisher takes exactly ours."""
    others = [r["id"] for r in sql("SELECT id FROM export_outbox WHERE sent_at IS NULL "
                                   "AND available_at<=DATE_ADD(NOW(6), INTERVAL 1 HOUR)") if r["id"] not in keep]
    if others:
        marks = ",".join(["%s"] * len(others))
        sql(f"UPDATE export_outbox SET available_at=DATE_ADD(available_at, INTERVAL 1 DAY) WHERE id IN ({marks})",
            others)
    try:
        yield
    finally:
        if others:
            sql(f"UPDATE export_outbox SET available_at=DATE_SUB(available_at, INTERVAL 1 DAY) WHERE id IN ({marks})",
                others)


# ---------------------------------------------------------------- the learner's modules (in the probe)

learner = Probe()  # the learner's modules load there, never in this process (the judge)


def _import(name: str, functions: tuple[str, ...]):
    """A stand-in for the learner's module (shared/probe.py; an import error is said with secrets masked)."""
    return learner.module(name, *functions)


def store(*extra: str):
    return _import("state_store", ("transaction", "submit_snapshot", "claim", "finish", *extra))


def recovery():
    return _import("recovery", ("recover_batch",))


def publisher():
    return _import("publisher", ("claim_event", "publish_one"))


def replay_job():
    return _import("replay_job", ("replay",))


class LearnerApp:
    """The learner's Celery app, reached through the probe: send_task runs there (lab15_learner.py)."""

    def send_task(self, name: str, args: list, task_id: str, queue: str, ignore_result: bool = True) -> str:
        return learner.call("lab15_learner:send_task", name, list(args), task_id, queue, ignore_result)


def celery_app() -> LearnerApp:
    _import("celery_app", ())
    assert learner.call("lab15_learner:has_app") is True, t("celery_app.py has no app")
    return LearnerApp()


def publish_after_takeover(event_id: str):
    """publish_one() in the probe, its event's claim taken over by another publisher right after the learner's
    claim_event returned it (lab15_learner.py): publish_one's return value."""
    return learner.call("lab15_learner:publish_after_takeover", event_id)


def token_of(job) -> str | None:
    if job is None:
        return None
    assert isinstance(job, dict) and job.get("lease_token"), t(
        "claim must return a row with lease_token or None, got {job!r}", job=job)[:200]
    return str(job["lease_token"])


def scan(rec) -> int:
    count = rec.recover_batch()
    assert isinstance(count, int), t("recover_batch() should return how many jobs it changed, got {count!r}",
                                     count=count)
    return count


def run_script(c, args: list[str], timeout: float = 40, env: dict | None = None):
    done = run_python(args, cwd=WORK, timeout=timeout, env=env)
    output = redact(done.stdout)
    lines = [line[:200] for line in output.splitlines() if line.strip()]
    return done.returncode, output, lines


# ---------------------------------------------------------------- the worker, its deliveries and pauses

def events() -> list[dict]:
    return read_events(EVENTS)


def hold(phase: str, job_id: str) -> None:
    with open(HOLD_LIST, "a", encoding="utf-8") as handle:
        handle.write(f"{phase} {job_id}\n")


def release(phase: str, job_id: str) -> None:
    (LOG_DIR / f"lab15-release-{phase}-{job_id}").touch()


def hold_event(phase: str, job_id: str) -> dict | None:
    return next((e for e in events() if e.get("kind") == "hold" and e.get("phase") == phase
                 and e.get("job") == job_id), None)


def wait_hold(phase: str, job_id: str, seconds: float = 20) -> dict:
    def found():
        return hold_event(phase, job_id)
    try:
        return wait_until(found, seconds, f"the worker to pause job {job_id} at {phase}", interval=0.02)
    except WaitTimeout:
        where = t("after its claim") if phase == "claim" else t(
            "at the file write (the path must hold the job_id, e.g. artifacts/<job_id>.<token>.json)")
        raise AssertionError(t("within {seconds:g}s the worker never paused job {job_id} {where} (see the worker log)",
                               seconds=seconds, job_id=short(job_id), where=where)) from None


def task_end(task_id: str) -> dict | None:
    return next((e for e in events() if e.get("kind") == "end" and e.get("task_id") == task_id), None)


def wait_end(task_id: str, seconds: float = 20) -> dict:
    try:
        return wait_until(lambda: task_end(task_id), seconds, f"task {task_id} to end", interval=0.05)
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
    app.send_task("products.export", args=[job_id], task_id=task_id, queue=queue, ignore_result=True)
    return task_id


def run_published(c, pub, app, job_id: str, event_id: str, seconds: float = 20) -> dict:
    """Publish this event and wait for the job to end.

    The confirm now locks the job row for a few milliseconds; a worker whose claim lands in exactly that
    window sees the row as busy (SKIP LOCKED), claims nothing and acknowledges the message.  The scan
    would re-dispatch the job after 60 s; here one duplicate message stands in for that re-dispatch.
    """
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
            row = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event_id,))
            if row and row[0]["sent_at"] is not None:
                return result
    raise AssertionError(t("event {event_id} still unsent after {tries} publish_one() calls (last returned "
                           "{result!r})", event_id=short(event_id), tries=tries, result=result))


# ---------------------------------------------------------------- the one known server mismatch

@contextlib.contextmanager
def explained():
    """Turn the one known server mismatch into a pointer to lesson 11's guide instead of a bare traceback."""
    try:
        yield
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1193 and "max_execution_time" in str(exc):
            raise AssertionError(t("the server is MariaDB, which has no max_execution_time: change that line in "
                                   "connect() to SET SESSION max_statement_time = 3 (lesson 11's guide)")) from None
        raise
