"""The worker wrapper for lesson 16's failure matrix (not a lesson file): the learner's Celery app, observed.

The matrix's workers run `celery -A lab16_worker:app worker ...`: the learner's own app, settings and tasks,
plus, in the worker process and its pool children only:

- every task start and end, appended as a JSON line to $TASKLAB_LOG_DIR/lab16-events.jsonl (how the matrix
  counts deliveries); a task that raised with its exception's type, first argument (a MySQL error number)
  and whether the database refused it (pymysql.OperationalError);
- a held write (shared/hold_gate.py) for the jobs in lab16-hold.txt, released by lab16-release-<job_id>;
- a database outage before claim: for a job in lab16-fail-claim.txt the first state_store.claim raises
  OperationalError(2003) before it touches the database, once per job;
- TASKLAB_RESULT_EXPIRES=N: this worker keeps Celery results N seconds (the result-cache row);
- a claim waits while the kit's own publish_one runs (lab16_publishing): the publisher's confirm locks the
  job row (a foreign-key check) until it commits, and a claim that met that lock would put luck into a row.
  Lesson 13 forces that race in a check of its own; here each row judges what it states.
"""

import os
import time

import pymysql

from shared.worker_events import record_task_runs
from shared.hold_gate import probe_gate, read_list

HOLD_SECONDS = 600.0  # far beyond any row: the release file, not this limit, ends a hold

GATE = probe_gate("lab16", HOLD_SECONDS)  # installed before the learner's modules load
FAIL_LIST = os.path.join(GATE.folder, "lab16-fail-claim.txt")


# ---------------------------------------------------------------- the database gone before claim

import state_store  # noqa: E402  patched before the task module imports claim from it

_real_claim = state_store.claim
PUBLISHING = "lab16-publishing-"  # + pid of a process inside lab16_publishing.publishing()
PUBLISH_WAIT = 60.0  # a publish_one takes milliseconds; a bound, so a wedged publisher never stops the worker


def _publishes_under_way() -> bool:
    return any(name.startswith(PUBLISHING) and os.path.exists(f"/proc/{name[len(PUBLISHING):]}")
               for name in os.listdir(GATE.folder))


def _claim(job_id, *args, **kwargs):
    job = str(job_id)
    if job in read_list(FAIL_LIST) and GATE.first_time(f"lab16-failed-{job}"):
        GATE.record("db_fault", job=job)
        raise pymysql.err.OperationalError(2003, "lab16 drill: the database cannot be reached")
    until = time.monotonic() + PUBLISH_WAIT
    while _publishes_under_way() and time.monotonic() < until:
        time.sleep(0.005)
    return _real_claim(job_id, *args, **kwargs)


state_store.claim = _claim


# ---------------------------------------------------------------- task events

def _started(task, args, kwargs) -> dict:
    return {"ignore_result": getattr(getattr(task, "request", None), "ignore_result", None)}


def _ended(task, state, retval) -> dict:
    if not isinstance(retval, BaseException):
        return {}
    # The task raised: what, and whether the database refused it.
    code = retval.args[0] if retval.args and isinstance(retval.args[0], int) else None
    return {"retval": None, "error_type": type(retval).__name__, "error_code": code, "error": str(retval)[:200],
            "database_error": isinstance(retval, pymysql.err.OperationalError)}


record_task_runs(GATE.record, started=_started, ended=_ended)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

if os.environ.get("TASKLAB_RESULT_EXPIRES"):
    app.conf.result_expires = int(os.environ["TASKLAB_RESULT_EXPIRES"])

__all__ = ["app"]
