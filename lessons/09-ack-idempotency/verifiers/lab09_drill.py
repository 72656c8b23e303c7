"""The worker wrapper for check 09.4 (not a lesson file): the learner's Celery app with a pause after os.replace.

`celery -A lab09_drill:app worker ...` runs the learner's own tasks and settings, plus, in this process and
its pool children: os.replace wrapped, so that right after the real rename onto a file whose name holds
TASKLAB_DRILL_JOB the first execution (across processes) records "held" and waits for the verifier's word
(shared.handshake, in TASKLAB_DRILL_DIR) -- which never comes: the verifier SIGKILLs it between the side
effect and the ack (on a failed check it says stop; a lifetime bounds the wait anyway); and every task's
start and end recorded (pid, message id, redelivered).  Events: TASKLAB_DRILL_DIR/events.jsonl.
"""

import os
from functools import partial
from pathlib import Path

from shared import handshake
from shared.events import append_event
from shared.worker_events import record_task_runs

DRILL_DIR = Path(os.environ["TASKLAB_DRILL_DIR"])
EVENTS = DRILL_DIR / "events.jsonl"
HOLD_JOB = os.environ["TASKLAB_DRILL_JOB"]
HELD_ONCE = DRILL_DIR / "held"  # created with O_EXCL: only the first execution ever pauses
HOLD_LIFETIME = 300.0  # a bound for a verifier that vanished, far beyond the check's own limit
record = partial(append_event, EVENTS)


_real_replace = os.replace


def _replace_then_hold(src, dst, *args, **kwargs):
    _real_replace(src, dst, *args, **kwargs)
    if HOLD_JOB not in os.fspath(dst):
        return
    try:
        os.close(os.open(HELD_ONCE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        record("replaced", path=os.fspath(dst))
        return
    record("held", path=os.fspath(dst))
    handshake.wait_go(DRILL_DIR, "held", lifetime=HOLD_LIFETIME)  # the verifier kills this process meanwhile
    record("hold-ended", path=os.fspath(dst))


# Before the learner's modules load, so even `from os import replace` binds the wrapper.
os.replace = _replace_then_hold


def _delivered(task, args, kwargs) -> dict:
    info = getattr(task.request, "delivery_info", None) or {}
    return {"job": args[0] if args else None, "redelivered": bool(info.get("redelivered"))}


record_task_runs(record, started=_delivered)


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
