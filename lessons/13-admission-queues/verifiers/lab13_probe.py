"""Kit probe for lesson 13's checks (not a lesson file): the learner's Celery app, observed.

The checker starts the two workers of the lesson itself, with the lesson's commands and this module
in place of celery_app:

    celery -A lab13_probe:app worker -Q exports.fast --concurrency=1 --prefetch-multiplier=1 -n fast@%h
    celery -A lab13_probe:app worker -Q exports.bulk --concurrency=1 --prefetch-multiplier=1 -n bulk@%h

It is the learner's own app, settings and tasks, plus, in these processes only:

- every task start and end is recorded with the worker's node name and the queue the message came
  from, as JSON lines in $LAB_LOG_DIR/lab13-events.jsonl (how the checks see who consumed what);
- a long job on demand: the first write-mode open() of a file whose path holds a job id listed in
  $LAB_LOG_DIR/lab13-hold.txt records a "hold" event and waits until $LAB_LOG_DIR/lab13-release-<job_id>
  exists, then records a "release" event.  That keeps a worker provably busy (checks 13.4 and 13.5): the
  checker writes the release file only after its verdict.  The backstop of 5 minutes outlasts every
  check, so a hold never ends by time while a check is watching it.
"""

import builtins
import io
import os
import time

from celery import signals

from shared.celerylab import append_event

FOLDER = os.environ.get("LAB_LOG_DIR") or "."
EVENTS = os.path.join(FOLDER, "lab13-events.jsonl")
HOLD_LIST = os.path.join(FOLDER, "lab13-hold.txt")
HOLD_BACKSTOP = 300.0  # seconds: longer than any check's timeout


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


def _held_jobs() -> list[str]:
    # os-level reads only: this runs inside the open() wrapper.
    try:
        fd = os.open(HOLD_LIST, os.O_RDONLY)
    except OSError:
        return []
    try:
        return os.read(fd, 65536).decode(errors="replace").split()
    finally:
        os.close(fd)


def _maybe_hold(file, mode) -> None:
    if not isinstance(mode, str) or not any(flag in mode for flag in "wax+"):
        return
    if not isinstance(file, (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(os.fspath(file))
    for job in _held_jobs():
        if job and job in path:
            marker = os.path.join(FOLDER, f"lab13-held-{job}")
            try:  # only the first write of this job waits
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                return
            record("hold", job=job)
            release = os.path.join(FOLDER, f"lab13-release-{job}")
            until = time.monotonic() + HOLD_BACKSTOP
            while not os.path.exists(release) and time.monotonic() < until:
                time.sleep(0.02)
            record("release", job=job, released=os.path.exists(release))
            return


_real_open = io.open


def _open(file, mode="r", *args, **kwargs):
    _maybe_hold(file, mode)
    return _real_open(file, mode, *args, **kwargs)


# Before the learner's modules load, so a module-level `open` binding sees the wrapper too.
io.open = _open
builtins.open = _open


def _where(task) -> dict:
    request = getattr(task, "request", None)
    info = getattr(request, "delivery_info", None) or {}
    return {"node": getattr(request, "hostname", None), "queue": info.get("routing_key")}


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
    record("start", task=getattr(task, "name", None), task_id=task_id, args=list(args or []), **_where(task))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task=getattr(task, "name", None), task_id=task_id, state=state, **_where(task),
           retval=retval if isinstance(retval, (dict, list, str, int, float, bool, type(None))) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
