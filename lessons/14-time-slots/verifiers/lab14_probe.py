"""Kit probe for lesson 14's checks (not a lesson file): the learner's Celery app, observed.

Check 14.2 starts the workers and the one beat as `celery -A lab14_probe:app ...`: the learner's own
app, settings and tasks, plus two kit additions in those processes only:

- every task start and end is appended as a JSON line to $LAB_LOG_DIR/lab14-events.jsonl (pid,
  worker name, the queue the message came from, message id, arguments, return value), marked with
  $LAB14_RUN: the check that started these processes reads only its own run's events;
- in the beat process, when LAB14_TICK_SECONDS is set, every beat_schedule entry that sends
  products.schedule_tick runs at that interval instead of the configured one, so the check sees
  ticks within seconds.  The lesson's file keeps its 60 s; nothing else in the entry changes.
"""

import os

from celery import signals

from shared.celerylab import append_event

EVENTS = os.path.join(os.environ.get("LAB_LOG_DIR") or ".", "lab14-events.jsonl")
TICK_TASK = "products.schedule_tick"
RUN = os.environ.get("LAB14_RUN")


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, run=RUN, **fields)


@signals.task_prerun.connect
def _on_start(task_id=None, task=None, args=None, **_):
    request = getattr(task, "request", None)
    delivery = getattr(request, "delivery_info", None) or {}
    record("start", task=getattr(task, "name", None), task_id=task_id, args=list(args or []),
           queue=delivery.get("routing_key"), worker=getattr(request, "hostname", None))


@signals.task_postrun.connect
def _on_end(task_id=None, task=None, state=None, retval=None, **_):
    record("end", task=getattr(task, "name", None), task_id=task_id, state=state,
           retval=retval if isinstance(retval, (dict, list, str, int, float, bool, type(None))) else repr(retval)[:200])


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
