"""The worker wrapper for lesson 14's checks (not a lesson file): the learner's Celery app, observed.

Check 14.2 starts the workers and the one beat as `celery -A lab14_worker:app ...`, with, in those processes
only: every task start and end appended to $TASKLAB_LOG_DIR/lab14-events.jsonl (worker name, queue, message
id, arguments, return value) marked with $TASKLAB_EVENTS_RUN, so the check reads only its own run's events;
and, when TASKLAB_TICK_SECONDS is set (the beat), the tick entries of beat_schedule at that interval instead
of their own (the lesson's file keeps its 60 s).
"""

import os
from functools import partial

from shared.events import append_event
from shared.worker_events import delivered_to, record_task_runs

EVENTS = os.path.join(os.environ.get("TASKLAB_LOG_DIR") or ".", "lab14-events.jsonl")
TICK_TASK = "products.schedule_tick"
RUN = os.environ.get("TASKLAB_EVENTS_RUN")
record = partial(append_event, EVENTS, run=RUN)

record_task_runs(record, started=lambda task, args, kwargs: delivered_to(task))

from celery_app import app  # noqa: E402  the learner's app, tasks and settings


def _shorten_ticks() -> None:
    seconds = os.environ.get("TASKLAB_TICK_SECONDS")
    if not seconds:
        return
    for entry in (app.conf.beat_schedule or {}).values():
        if isinstance(entry, dict) and entry.get("task") == TICK_TASK:
            entry["schedule"] = float(seconds)


_shorten_ticks()

__all__ = ["app"]
