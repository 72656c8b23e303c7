"""Kit probe for lesson 10's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab10_probe:app worker ...`: the learner's
own app, settings and tasks, plus, in this process and its pool children only:

- every execution, read and planned retry of products.retry_demo is recorded (message id, job id,
  arguments, attempt, the countdown handed to self.retry) as JSON lines in
  $LAB_LOG_DIR/retry-events.jsonl;
- fetch_snapshot raises ValueError("invalid export request") for the job ids listed in
  $LAB_LOG_DIR/retry-permanent.txt (the course's "temporarily raise ValueError" step);
- when the task declares backoff_base / backoff_max, they are shrunk (caps of 0.02, 0.04,
  0.08 s …) so the checks never wait out the lesson's real delays.  A task without them keeps
  its own delays (caps of 1, 2, 4 s).

Nothing is imported ahead of the worker: a module missing from include stays missing.
"""

import os
from pathlib import Path

from celery import signals

from shared.celerylab import append_event

TASK_NAME = "products.retry_demo"
FOLDER = Path(os.environ.get("LAB_LOG_DIR") or ".")
EVENTS = FOLDER / "retry-events.jsonl"
PERMANENT = FOLDER / "retry-permanent.txt"
FAST_BACKOFF = {"backoff_base": 0.02, "backoff_max": 0.16}


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


def _current():
    from celery import current_task
    request = current_task.request if current_task else None
    args = list(getattr(request, "args", None) or [])
    return (getattr(request, "id", None), args[0] if args else None)


def _instrument(task) -> None:
    """Once per process: wrap the module's fetch_snapshot and shrink the task's backoff."""
    if getattr(task, "_lab_probe", False):
        return
    task._lab_probe = True
    module_globals = getattr(task.run, "__globals__", {})
    original = module_globals.get("fetch_snapshot")
    if callable(original):
        def fetch_snapshot(*args, **kwargs):
            task_id, job = _current()
            record("read", task_id=task_id, job=job, args=list(args), kwargs=kwargs)
            permanent = PERMANENT.read_text().split() if PERMANENT.exists() else []
            if job in permanent:
                raise ValueError("invalid export request")
            return original(*args, **kwargs)
        module_globals["fetch_snapshot"] = fetch_snapshot
    knobs = {}
    for name, value in FAST_BACKOFF.items():
        if hasattr(task, name):
            setattr(task, name, value)
            knobs[name] = value
    record("knobs", **knobs, max_retries=task.max_retries, wrapped=callable(original))


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
    if task is None or task.name != TASK_NAME:
        return
    _instrument(task)
    record("start", task_id=task_id, job=(list(args or []) or [None])[0], args=list(args or []),
           kwargs=kwargs or {}, retries=task.request.retries)


@signals.task_retry.connect
def _on_retry(sender=None, request=None, reason=None, **_):
    if sender is None or sender.name != TASK_NAME:
        return
    when = getattr(reason, "when", None)
    record("retry", task_id=getattr(request, "id", None), retries=getattr(request, "retries", None),
           when=when if isinstance(when, (int, float)) else repr(when), exc=repr(getattr(reason, "exc", None)))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    if task is None or task.name != TASK_NAME:
        return
    record("end", task_id=task_id, state=state, retval=retval if isinstance(retval, dict) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app; the worker imports its include list

__all__ = ["app"]
