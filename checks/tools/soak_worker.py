"""The worker wrapper for the soak (not a lesson file): the learner's Celery app, observed and slowed a little.

The soak starts its workers as `celery -A checks.tools.soak_worker:app worker ...`.  Every task start and end is
appended to $TASKLAB_LOG_DIR/soak-deliveries.jsonl (pid, message id, job id): the starts are how the
ledger counts deliveries per job.  SOAK_TASK_DELAY (seconds, e.g. 0.2) makes each execution hold its lease that
long before finish() — as a slow file write would — so a chaos kill lands on a job that is really
`running` with a live lease, not only between tasks.
"""

import os
import time

from shared.events import append_event
from shared.worker_events import record_task_runs

DELIVERIES = os.path.join(os.environ.get("TASKLAB_LOG_DIR") or ".", "soak-deliveries.jsonl")
DELAY = float(os.environ.get("SOAK_TASK_DELAY", "0"))


record_task_runs(lambda kind, **fields: append_event(DELIVERIES, kind, **fields),
                 started=lambda task, args, kwargs: {"job_id": args[0] if args else None})


import state_store  # noqa: E402  patched before the task module imports finish from it

if DELAY:
    _finish = state_store.finish

    def _slow_finish(*args, **kwargs):
        time.sleep(DELAY)  # the "file write" that a kill interrupts, with the lease held
        return _finish(*args, **kwargs)

    state_store.finish = _slow_finish

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
