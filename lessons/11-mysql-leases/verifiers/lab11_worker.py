"""The worker wrapper for lesson 11's checks (not a lesson file): tasks.json starts the lesson's worker as
`celery -A lab11_worker:app worker ...`, the learner's own app, settings and tasks, plus, in this process and
its pool children only: every task start and end recorded (shared/worker_events.py) in
$TASKLAB_LOG_DIR/lab11-events.jsonl, and a deliberately slow job: the first write of a file whose path holds a
job id listed in lab11-hold.txt waits (at most 25 s) for the checker's release (shared/hold_gate.py), which
looks at information_schema.innodb_trx meanwhile.  Nothing is imported ahead of the worker: a module missing
from include stays missing.
"""

from shared.worker_events import record_task_runs
from shared.hold_gate import probe_gate

HOLD_SECONDS = 25.0

GATE = probe_gate("lab11", HOLD_SECONDS)  # installed before the learner's modules load
record_task_runs(GATE.record)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
