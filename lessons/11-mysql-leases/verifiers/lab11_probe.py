"""Kit probe for lesson 11's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab11_probe:app worker ...`: the learner's
own app, settings and tasks, plus, in this process and its pool children only:

- every task start and end is recorded (pid, message id, arguments, return value) as JSON lines
  in $TASKLAB_LOG_DIR/lab11-events.jsonl;
- a deliberately slow job: the first write-mode open() of a file whose path holds a job id
  listed in $TASKLAB_LOG_DIR/lab11-hold.txt records a "hold" event and waits (at most 25 s) until
  $TASKLAB_LOG_DIR/lab11-release-<job_id> exists, then writes as usual.  The verifier looks at
  information_schema.innodb_trx during that wait.

Path.write_text / write_bytes / open() all go through io.open, which is what gets wrapped.
Nothing is imported ahead of the worker: a module missing from include stays missing.
"""

import os


from shared.lesson_celery import append_event
from shared.worker_events import record_task_runs
from shared.hold_gate import Gate

FOLDER = os.environ.get("TASKLAB_LOG_DIR") or "."
EVENTS = os.path.join(FOLDER, "lab11-events.jsonl")
HOLD_LIST = os.path.join(FOLDER, "lab11-hold.txt")
HOLD_SECONDS = 25.0


def record(kind: str, **fields) -> None:
    append_event(EVENTS, kind, **fields)


# The first write of a held job's file waits for the checker's release (shared/hold_gate.py), installed
# before the learner's modules load.
Gate(FOLDER, "lab11", HOLD_LIST, backstop=HOLD_SECONDS, record=record).hold_first_writes()


record_task_runs(record)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
