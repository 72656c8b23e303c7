"""Kit probe for lesson 12's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab12_probe:app worker ...`: the learner's own
app, settings and tasks, plus one addition in this process and its pool children — every task
start and end is appended (pid, message id, arguments, return value) as a JSON line to
$LAB_LOG_DIR/lab12-events.jsonl.  That is how the checks count deliveries of one outbox event.
"""

import os

from celery import signals

from shared.celerylab import append_event

EVENTS = os.path.join(os.environ.get("LAB_LOG_DIR") or ".", "lab12-events.jsonl")


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, kwargs=None, **_):
    record("start", task=getattr(task, "name", None), task_id=task_id, args=list(args or []))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task=getattr(task, "name", None), task_id=task_id, state=state,
           retval=retval if isinstance(retval, (dict, list, str, int, float, bool, type(None))) else repr(retval)[:200])


from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
