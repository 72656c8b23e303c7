"""Kit probe for check 09.4 (not a lesson file): the learner's Celery app with a pause after os.replace.

A worker started as `celery -A lab09_drill:app worker ...` runs the learner's own tasks and
settings.  Two things are added, both in this process and its pool children only:

- os.replace is wrapped: right after the real rename onto a file whose name holds
  LAB_DRILL_JOB, the first execution (across processes) records a "held" event and waits,
  up to LAB_DRILL_HOLD seconds, so the verifier can SIGKILL it between the side effect and the ack;
- every task start and end is recorded (pid, message id, redelivered flag).

Events are JSON lines appended to LAB_DRILL_EVENTS.  Nothing here touches the broker.
"""

import json
import os
import time

from celery import signals

EVENTS = os.environ["LAB_DRILL_EVENTS"]
HOLD_JOB = os.environ["LAB_DRILL_JOB"]
HOLD_SECONDS = float(os.environ.get("LAB_DRILL_HOLD", "30"))
HELD_ONCE = EVENTS + ".held"  # created with O_EXCL: only the first execution ever pauses


def record(kind: str, **fields) -> None:
    line = json.dumps({"kind": kind, "pid": os.getpid(), "ppid": os.getppid(), "at": time.time(), **fields})
    fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


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
    until = time.monotonic() + HOLD_SECONDS
    while time.monotonic() < until:  # the verifier kills this process during the wait
        time.sleep(0.02)
    record("hold-expired", path=os.fspath(dst))


# Before the learner's modules load, so even `from os import replace` binds the wrapper.
os.replace = _replace_then_hold


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, **_):
    info = getattr(task.request, "delivery_info", None) or {}
    record("start", task_id=task_id, job=(args or [None])[0], redelivered=bool(info.get("redelivered")))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task_id=task_id, state=state, retval=retval if isinstance(retval, dict) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
