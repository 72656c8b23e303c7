"""Kit probe for lesson 16's failure matrix (not a lesson file): the learner's Celery app, observed.

The matrix starts its workers as `celery -A lab16_probe:app worker ...`: the learner's own app,
settings and tasks, plus, in the worker process and its pool children only:

- every task start and end is appended (pid, message id, arguments, state, return value) as a
  JSON line to $TASKLAB_LOG_DIR/lab16-events.jsonl: how the matrix counts deliveries of one job.  A task
  that raised is recorded with the exception's type, its first argument (a MySQL error number) and
  whether it was a database error (pymysql.OperationalError: the database refused or dropped it);
- a held write: the first write-mode open() of a path holding a job id listed in
  $TASKLAB_LOG_DIR/lab16-hold.txt records a "hold" event and waits for $TASKLAB_LOG_DIR/lab16-release-<job_id>
  (the matrix kills, cancels or overtakes the job meanwhile).  The release event says whether the
  matrix released it; a hold never outlasts HOLD_SECONDS, so a worker whose matrix died goes on;
- a database outage before claim: for a job listed in $TASKLAB_LOG_DIR/lab16-fail-claim.txt, the
  first call of state_store.claim raises OperationalError(2003) before it touches the database,
  once per job — the worker loses its database as it enters claim (whether its connections are
  new per transaction or reused, this is where the outage shows);
- LAB16_RESULT_EXPIRES=N (environment): this worker keeps Celery results N seconds, the
  "shortened result_expires" of the result-cache row;
- a claim waits while the matrix's own publish_one runs ($TASKLAB_LOG_DIR/lab16-publishing-<pid>, see
  lab16_publishing.publishing): the publisher's confirm locks the job row (a foreign-key check) until it
  commits, and a claim that met that lock would put luck into a row.  Lesson 13 forces that race in a
  check of its own, with a message that teaches the fix; here each row judges what it states.

Nothing else changes: the tasks, their names and settings are the learner's.
"""

import os
import time

import pymysql

from shared.lesson_celery import append_event
from shared.worker_events import record_task_runs
from shared.hold_gate import Gate, read_list

FOLDER = os.environ.get("TASKLAB_LOG_DIR") or "."
EVENTS = os.path.join(FOLDER, "lab16-events.jsonl")
HOLD_LIST = os.path.join(FOLDER, "lab16-hold.txt")
FAIL_LIST = os.path.join(FOLDER, "lab16-fail-claim.txt")
HOLD_SECONDS = 600.0  # far beyond any row: the release file, not this limit, ends a hold

_current = {"job": None}  # the job id of the task running in this process (prefork: one at a time)


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


GATE = Gate(FOLDER, "lab16", HOLD_LIST, backstop=HOLD_SECONDS, record=record)

# ---------------------------------------------------------------- held writes

# The first write of a held job's file waits for the matrix's release (shared/hold_gate.py), installed
# before the learner's modules load.
GATE.hold_first_writes()


# ---------------------------------------------------------------- the database gone before claim

import state_store  # noqa: E402  patched before the task module imports claim from it

_real_claim = state_store.claim
PUBLISHING = "lab16-publishing-"  # + pid of a process inside lab16_publishing.publishing()
PUBLISH_WAIT = 60.0  # a publish_one takes milliseconds; a bound, so a wedged publisher never stops the worker


def _publishes_under_way() -> bool:
    for name in os.listdir(FOLDER):
        if name.startswith(PUBLISHING) and os.path.exists(f"/proc/{name[len(PUBLISHING):]}"):
            return True
    return False


def _claim(job_id, *args, **kwargs):
    job = str(job_id)
    if job in read_list(FAIL_LIST) and GATE.first_time(f"lab16-failed-{job}"):
        record("db_fault", job=job)
        raise pymysql.err.OperationalError(2003, "lab16 drill: the database cannot be reached")
    until = time.monotonic() + PUBLISH_WAIT
    while _publishes_under_way() and time.monotonic() < until:
        time.sleep(0.005)
    return _real_claim(job_id, *args, **kwargs)


state_store.claim = _claim


# ---------------------------------------------------------------- task events

def _started(task, args, kwargs) -> dict:
    _current["job"] = str(args[0]) if args else None
    return {"ignore_result": getattr(getattr(task, "request", None), "ignore_result", None)}


def _ended(task, state, retval) -> dict:
    _current["job"] = None
    if not isinstance(retval, BaseException):
        return {}
    # The task raised: what, and whether the database refused it.
    code = retval.args[0] if retval.args and isinstance(retval.args[0], int) else None
    return {"retval": None, "error_type": type(retval).__name__, "error_code": code, "error": str(retval)[:200],
            "database_error": isinstance(retval, pymysql.err.OperationalError)}


record_task_runs(record, started=_started, ended=_ended)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

if os.environ.get("LAB16_RESULT_EXPIRES"):
    app.conf.result_expires = int(os.environ["LAB16_RESULT_EXPIRES"])

__all__ = ["app"]
