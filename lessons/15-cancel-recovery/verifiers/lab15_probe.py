"""Kit probe for lesson 15's checks (not a lesson file): the learner's Celery app, observed and paused.

tasks.json starts the lesson's worker as `celery -A lab15_probe:app worker ...`: the learner's own app,
settings and tasks, plus, in this process and its pool children only:

- every task start and end is appended (pid, message id, arguments, return value) as a JSON line to
  $LAB_LOG_DIR/lab15-events.jsonl;
- two pauses a check can ask for, per job id, by a line in $LAB_LOG_DIR/lab15-hold.txt:
    `claim <job_id>`  right after state_store.claim() returned that job (the lease is committed, the
                      task has not reached its work boundary yet);
    `write <job_id>`  at the first write-mode open() of a file whose path holds the job id (the task
                      has passed its boundary check and is writing).
  A pause records a "hold" event and waits, at most 60 s, until $LAB_LOG_DIR/lab15-release-<phase>-<job_id>
  exists.  Only the first pause of each phase and job waits (across pool children).

claim() is wrapped on the state_store module before the learner's task module imports it; the
wrapper returns exactly what the learner's claim returned.  Nothing else is changed.
"""

import builtins
import io
import os
import time

from celery import signals

from shared.celerylab import append_event

FOLDER = os.environ.get("LAB_LOG_DIR") or "."
EVENTS = os.path.join(FOLDER, "lab15-events.jsonl")
HOLD_LIST = os.path.join(FOLDER, "lab15-hold.txt")
HOLD_SECONDS = 60.0


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


def _held(phase: str) -> list[str]:
    # os-level reads only: this also runs inside the open() wrapper.
    try:
        fd = os.open(HOLD_LIST, os.O_RDONLY)
    except OSError:
        return []
    try:
        text = os.read(fd, 1 << 20).decode(errors="replace")
    finally:
        os.close(fd)
    return [parts[1] for parts in (line.split() for line in text.splitlines())
            if len(parts) == 2 and parts[0] == phase]


def _pause(phase: str, job: str, **fields) -> None:
    marker = os.path.join(FOLDER, f"lab15-held-{phase}-{job}")
    try:  # only the first pause of this phase and job waits
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return
    record("hold", phase=phase, job=job, **fields)
    release = os.path.join(FOLDER, f"lab15-release-{phase}-{job}")
    until = time.monotonic() + HOLD_SECONDS
    while not os.path.exists(release) and time.monotonic() < until:
        time.sleep(0.02)
    record("release", phase=phase, job=job, released=os.path.exists(release))


# ---------------------------------------------------------------- pause at the write

def _maybe_hold_write(file, mode) -> None:
    if not isinstance(mode, str) or not any(flag in mode for flag in "wax+"):
        return
    if not isinstance(file, (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(os.fspath(file))
    for job in _held("write"):
        if job and job in path:
            _pause("write", job, path=path)
            return


_real_open = io.open


def _open(file, mode="r", *args, **kwargs):
    _maybe_hold_write(file, mode)
    return _real_open(file, mode, *args, **kwargs)


io.open = _open
builtins.open = _open


# ---------------------------------------------------------------- pause after the claim

def _wrap_claim() -> None:
    try:
        import state_store
    except Exception:  # noqa: BLE001 - the worker's own import of the learner's code reports it
        return
    real = getattr(state_store, "claim", None)
    if not callable(real):
        return

    def claim(job_id, *args, **kwargs):
        job = real(job_id, *args, **kwargs)
        if job is not None and str(job_id) in _held("claim"):
            token = job.get("lease_token") if isinstance(job, dict) else None
            _pause("claim", str(job_id), token=str(token))
        return job

    claim.__wrapped__ = real
    state_store.claim = claim


_wrap_claim()


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
    record("start", task=getattr(task, "name", None), task_id=task_id, args=list(args or []))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task=getattr(task, "name", None), task_id=task_id, state=state,
           retval=retval if isinstance(retval, (dict, list, str, int, float, bool, type(None))) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
