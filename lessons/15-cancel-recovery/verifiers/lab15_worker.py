"""The worker wrapper for lesson 15's checks (not a lesson file): the learner's Celery app, observed and paused.

tasks.json starts the lesson's worker as `celery -A lab15_worker:app worker ...`: the learner's own app,
settings and tasks, plus, in this process and its pool children only:

- every task start and end is appended as a JSON line to $TASKLAB_LOG_DIR/lab15-events.jsonl;
- two pauses (shared/hold_gate.py) a check asks for by a line in $TASKLAB_LOG_DIR/lab15-hold.txt:
    `claim <job_id>`  right after state_store.claim() returned that job (the lease is committed, the
                      task has not reached its work boundary yet);
    `write <job_id>`  at the first write-mode open() of a file whose path holds the job id (the task
                      has passed its boundary check and is writing).

claim() is wrapped on the state_store module before the learner's task module imports it; the
wrapper returns exactly what the learner's claim returned.  Nothing else is changed.
"""

from shared.worker_events import record_task_runs
from shared.hold_gate import probe_gate

HOLD_SECONDS = 60.0

GATE = probe_gate("lab15", HOLD_SECONDS, phase="write")  # the write gate, before the learner's modules load


def _wrap_claim() -> None:
    try:
        import state_store
    except Exception:  # noqa: BLE001 - the worker's own import of the learner's code reports it
        return
    real = getattr(state_store, "claim", None)
    if not callable(real):
        return

    def claim(job_id, *args, **kwargs):
        job = real(job_id, *args, **kwargs)
        if job is not None and str(job_id) in GATE.listed("claim"):
            token = job.get("lease_token") if isinstance(job, dict) else None
            GATE.pause(str(job_id), "claim", token=str(token))
        return job

    claim.__wrapped__ = real
    state_store.claim = claim


_wrap_claim()
record_task_runs(GATE.record)

from celery_app import app  # noqa: E402  the learner's app, tasks and settings

__all__ = ["app"]
