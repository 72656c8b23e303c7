"""The worker wrapper for lesson 12's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab12_worker:app worker ...`: the learner's own
app, settings and tasks, plus one addition in this process and its pool children — every task
start and end is appended (pid, message id, arguments, return value) as a JSON line to
$TASKLAB_LOG_DIR/lab12-events.jsonl.  That is how the checks count deliveries of one outbox event.
"""

import functools
import os

from shared.events import append_event
from shared.worker_events import record_task_runs

EVENTS = os.path.join(os.environ.get("TASKLAB_LOG_DIR") or ".", "lab12-events.jsonl")
record_task_runs(functools.partial(append_event, EVENTS))

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
