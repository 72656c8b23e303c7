"""The worker wrapper for lesson 13's checks (not a lesson file): the learner's Celery app, observed.

The checker starts the lesson's two workers itself (lab13_fixture.workers: the lesson's commands, -Q
exports.fast / exports.bulk), with this module in place of celery_app.  It is the learner's own app,
settings and tasks, plus, in these processes only:

- every task start and end is recorded with the worker's node name and the queue the message came
  from, as JSON lines in $TASKLAB_LOG_DIR/lab13-events.jsonl (how the checks see who consumed what);
- a long job on demand (shared/hold_gate.py): the first write of a file whose path holds a job id listed in
  $TASKLAB_LOG_DIR/lab13-hold.txt waits for the checker's release.  That keeps a worker provably busy (13.4,
  13.5); the checker releases only after its verdict, and the backstop outlasts every check.
"""

from shared.worker_events import delivered_to, record_task_runs
from shared.hold_gate import probe_gate

HOLD_BACKSTOP = 300.0  # seconds: longer than any check's timeout

GATE = probe_gate("lab13", HOLD_BACKSTOP)  # installed before the learner's modules load


record_task_runs(GATE.record, started=lambda task, args, kwargs: delivered_to(task),
                 ended=lambda task, state, retval: delivered_to(task))

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
