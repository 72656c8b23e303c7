"""Kit probe for lesson 11's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab11_probe:app worker ...`: the learner's
own app, settings and tasks, plus, in this process and its pool children only:

- every task start and end is recorded (pid, message id, arguments, return value) as JSON lines
  in $LAB_LOG_DIR/lab11-events.jsonl;
- a deliberately slow job: the first write-mode open() of a file whose path holds a job id
  listed in $LAB_LOG_DIR/lab11-hold.txt records a "hold" event and waits (at most 25 s) until
  $LAB_LOG_DIR/lab11-release-<job_id> exists, then writes as usual.  The verifier looks at
  information_schema.innodb_trx during that wait.

Path.write_text / write_bytes / open() all go through io.open, which is what gets wrapped.
Nothing is imported ahead of the worker: a module missing from include stays missing.
"""

import builtins
import io
import os
import time

from celery import signals

from shared.celerylab import append_event

FOLDER = os.environ.get("LAB_LOG_DIR") or "."
EVENTS = os.path.join(FOLDER, "lab11-events.jsonl")
HOLD_LIST = os.path.join(FOLDER, "lab11-hold.txt")
HOLD_SECONDS = 25.0


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
            marker = os.path.join(FOLDER, f"lab11-held-{job}")
            try:  # only the first write of this job waits (O_EXCL across pool children)
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                return
            record("hold", job=job, path=path)
            release = os.path.join(FOLDER, f"lab11-release-{job}")
            until = time.monotonic() + HOLD_SECONDS
            while not os.path.exists(release) and time.monotonic() < until:
                time.sleep(0.02)
            record("release", job=job, path=path, released=os.path.exists(release))
            return


_real_open = io.open


def _open(file, mode="r", *args, **kwargs):
    _maybe_hold(file, mode)
    return _real_open(file, mode, *args, **kwargs)


# Before the learner's modules load, so a module-level `open` binding sees the wrapper too.
io.open = _open
builtins.open = _open


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
    record("start", task=getattr(task, "name", None), task_id=task_id, args=list(args or []),
           kwargs=kwargs or {})


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task=getattr(task, "name", None), task_id=task_id, state=state,
           retval=retval if isinstance(retval, (dict, list, str, int, float, bool, type(None))) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
