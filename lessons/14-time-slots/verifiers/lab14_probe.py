"""Kit probe for lesson 14's checks (not a lesson file): the learner's Celery app, observed.

Check 14.2 starts the workers and the one beat as `celery -A lab14_probe:app ...`: the learner's own
app, settings and tasks, plus two kit additions in those processes only:

- every task start and end is appended as a JSON line to $TASKLAB_LOG_DIR/lab14-events.jsonl (pid,
  worker name, the queue the message came from, message id, arguments, return value), marked with
  $LAB14_RUN: the check that started these processes reads only its own run's events;
- in the beat process, when LAB14_TICK_SECONDS is set, every beat_schedule entry that sends
  products.schedule_tick runs at that interval instead of the configured one, so the check sees
  ticks within seconds.  The lesson's file keeps its 60 s; nothing else in the entry changes.
"""

import os


from shared.lesson_celery import append_event
from shared.worker_events import record_task_runs

EVENTS = os.path.join(os.environ.get("TASKLAB_LOG_DIR") or ".", "lab14-events.jsonl")
TICK_TASK = "products.schedule_tick"
RUN = os.environ.get("LAB14_RUN")


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, run=RUN, **fields)


def _delivered(task, args, kwargs) -> dict:
    request = getattr(task, "request", None)
    delivery = getattr(request, "delivery_info", None) or {}
    return {"queue": delivery.get("routing_key"), "worker": getattr(request, "hostname", None)}


record_task_runs(record, started=_delivered)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings


def _shorten_ticks() -> None:
    seconds = os.environ.get("LAB14_TICK_SECONDS")
    if not seconds:
        return
    for entry in (app.conf.beat_schedule or {}).values():
        if isinstance(entry, dict) and entry.get("task") == TICK_TASK:
            entry["schedule"] = float(seconds)


_shorten_ticks()

__all__ = ["app"]
