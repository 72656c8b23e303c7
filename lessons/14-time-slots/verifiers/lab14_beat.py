"""Check 14.2's chain as the kit runs it (not a lesson file): a real `celery beat` and the fast and bulk
workers (lab14_worker.py in place of celery_app), the first slot a tick creates, `python publisher.py`, the
job's end, the probe's events, the ticks left in exports.fast.  lab14_verify.py judges by what these return;
an assert here is a chain that cannot go on (no slot, a process gone, a job that never ends).
"""

from __future__ import annotations

import os
import sys

from shared import lesson_db
from shared.lesson_celery import READY_MARK, queued_messages, spawn, take_back
from shared.logs import LOG_DIR
from shared.events import job_events, read_events, short
from shared.scripts import log_lines
from shared.settings import redact
from shared.i18n import t
from shared.lesson_db import TERMINAL, sql, wait_status
from shared.proc import Process, WaitTimeout, wait_all_ready, wait_until

EVENTS = LOG_DIR / "lab14-events.jsonl"  # each marked with its processes' TASKLAB_EVENTS_RUN (lab14_worker.py)
TICK = "products.schedule_tick"

WORKER_ARGV = ["-m", "celery", "-A", "lab14_worker:app", "worker", "-l", "INFO", "--concurrency=1",
               "--without-mingle", "--without-gossip", "--without-heartbeat"]


def new_slots(before: set[str]) -> list[dict]:
    rows = sql("SELECT s.slot_key, s.job_id, j.status, j.result_ref FROM export_schedule_slots s "
               "JOIN export_jobs j ON j.id = s.job_id ORDER BY s.created_at")
    return [r for r in rows if r["slot_key"] not in before]


def publish_until_sent(c, event_id: str) -> str:
    return lesson_db.publish_until_sent(c, event_id, t("python publisher.py failed (output below)"))


def queued_ticks() -> list[bytes]:
    """Tick messages still waiting in exports.fast."""
    return [raw for raw, headers in queued_messages("exports.fast") if headers.get("task") == TICK]


def drop_leftover_ticks() -> int:
    """The check's own leftovers: ticks beat sent that no worker took before it stopped.  Left in the
    queue they would run in the next lesson's fast worker and create a job there."""
    return take_back("exports.fast", queued_ticks())


def start_chain(procs: dict[str, Process], run: str) -> None:
    """The fast worker (-Q exports.fast), the bulk worker (-Q exports.bulk) and one beat (its schedule file in
    the kit's log dir, its tick every 1 s in that process only), all marked with `run`; each goes into `procs`
    as it starts (the caller stops them, pass or fail).  Returns once all three are ready."""
    schedule_file = LOG_DIR / "lab14-beat-schedule"
    for old in LOG_DIR.glob("lab14-beat-schedule*"):
        old.unlink()
    env = dict(os.environ, TASKLAB_EVENTS_RUN=run)
    for role, extra in (("fast", ["-Q", "exports.fast", "-n", "fast@%h"]),
                        ("bulk", ["-Q", "exports.bulk", "-n", "bulk@%h"])):
        procs[role] = spawn([sys.executable, *WORKER_ARGV, *extra], f"lab14-{role}.log", env)
    procs["beat"] = spawn([sys.executable, "-m", "celery", "-A", "lab14_worker:app", "beat", "-l", "INFO",
                           f"--schedule={schedule_file}"], "lab14-beat.log", dict(env, TASKLAB_TICK_SECONDS="1"))
    wait_all_ready((procs["fast"], procs["bulk"]), 40, grace=8, log_contains=READY_MARK)
    procs["beat"].wait_ready(20, log_contains="beat: Starting")


def wait_first_slot(c, procs: dict[str, Process], before: set[str], run: str, queue: str | None) -> dict:
    """The first slot a tick created after `before` (with its job); why none came, if none did."""
    def first_slot():
        fast_log = procs["fast"].log_text()
        if "unregistered task" in fast_log.lower():
            return "unregistered"
        for role, proc in procs.items():
            if not proc.alive():
                return f"dead:{role}"
        rows = new_slots(before)
        return rows[0] if rows else None

    try:
        got = wait_until(first_slot, 20, "a tick to create a slot", interval=0.1)
    except WaitTimeout:
        sent = log_lines(procs["beat"].log_text(), "Sending due task")
        ran = read_events(EVENTS, run=run, task=TICK, kind="end")
        for line in sent[-2:]:
            c.note("  beat: " + line)
        for e in ran[-2:]:
            c.note(f"  tick → {e.get('state')} {str(e.get('retval'))[:120]}")
        where = "" if queue == "exports.fast" else t("; the ticks go to {queue} while the fast worker listens on "
                                                     "exports.fast", queue=queue or t('the default queue'))
        raise AssertionError(t("no new slot within 20 s: beat sent {n_sent} tick(s), the worker finished {n_ran} "
                               "(see below){where}", n_sent=len(sent), n_ran=len(ran), where=where)) from None
    if got == "unregistered":
        for line in log_lines(procs["fast"].log_text(), "nregistered")[-2:]:
            c.note("  fast: " + line)
        raise AssertionError(t("the fast worker does not know {tick}: add schedule_tasks to include in celery_app.py "
                               "and restart the worker", tick=TICK))
    if isinstance(got, str):
        role = got.split(":", 1)[1]
        raise AssertionError(t("the {role} process exited:\n", role=role)
                             + redact(procs[role].log_tail(8)))
    return got


# A backstop, never a speed: the job ends in about a second, and the wait returns as soon as its row says so.
# A fully loaded machine (a class graded beside a flake hunt) was seen to need more than 20 s.
FINISH_BOUND = 60.0


def wait_finished(job_id: str) -> dict:
    """The export job's row once it has ended (bounded: FINISH_BOUND)."""
    return wait_status(job_id, TERMINAL, FINISH_BOUND, interval=0.1, late=lambda row: t(
        "job {job_id} did not finish within {seconds:g} s ({status}): is the bulk worker consuming?",
        job_id=short(job_id), seconds=FINISH_BOUND, status=row['status']))


def tick_chain_runs(run: str, job_id: str) -> tuple[list[dict], list[dict], list[dict]]:
    """From this run's probe events: the ticks started, the ticks that returned this job, the export's starts."""
    seen = read_events(EVENTS, run=run)
    ticks = [e for e in seen if e.get("task") == TICK and e.get("kind") == "start"]
    made = [e for e in seen if e.get("task") == TICK and e.get("kind") == "end" and e.get("retval") == job_id]
    exports = job_events(seen, job_id, task="products.export")
    return ticks, made, exports
