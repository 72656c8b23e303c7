"""The worker wrapper for lesson 10's checks (not a lesson file): the learner's Celery app, observed.

tasks.json starts the lesson's worker as `celery -A lab10_worker:app worker ...`: the learner's own app,
settings and tasks, plus, in this process and its pool children only:

- every execution, read and planned retry of products.retry_demo is recorded in
  $TASKLAB_LOG_DIR/retry-events.jsonl with its attempt (self.request.retries): the verifier counts by
  attempt number, never by line order; each start also records its message's eta (for the figure only);
- attempt n > 0 starts only once attempt n - 1 has ended: `self.retry()` publishes the next attempt
  *before* its own RETRY state reaches the result backend, so the late RETRY could overwrite the end;
- for the job ids listed in retry-permanent.txt fetch_snapshot raises ValueError("invalid export
  request") (the course's "temporarily raise ValueError" step); for those in retry-budget.txt the read
  uses up the budget: the task module's clock then reads deadline_epoch - 0.05 s, so the retry decision
  meets the exercise's 0.05 s budget however late the message arrived -- nothing waits the time out;
- a task's backoff_base / backoff_max, when it declares them, are shrunk (caps 0.02, 0.04 s ...), so the
  checks never wait out the real delays; a task without them keeps its own (caps 1, 2, 4 s).

Nothing is imported ahead of the worker: a module missing from include stays missing.
"""

import os
import time
from datetime import datetime
from functools import partial
from pathlib import Path

from shared.hold_gate import read_list
from shared.learner_spies import replace_time
from shared.events import append_event, read_events
from shared.proc import WaitTimeout, wait_until
from shared.worker_events import record_task_runs

TASK_NAME = "products.retry_demo"
FOLDER = Path(os.environ.get("TASKLAB_LOG_DIR") or ".")
EVENTS = FOLDER / "retry-events.jsonl"
record = partial(append_event, EVENTS)
PERMANENT = FOLDER / "retry-permanent.txt"
BUDGET = FOLDER / "retry-budget.txt"
BUDGET_LEFT = 0.05  # seconds the task's clock leaves before the deadline after a budget-eating read
FAST_BACKOFF = {"backoff_base": 0.02, "backoff_max": 0.16}
PREVIOUS_ATTEMPT_WAIT = 60.0  # bound only: the previous attempt is past its retry() and ends in moments

_skew = 0.0  # added to the learner module's clock; set by a budget-eating read, cleared at each start and end

# Fresh records for this worker: the worker imports this module once, before any task (its pool children
# are forked after), and the verifier never clears them, so a verifier started again mid-run loses nothing.
for _stale in (EVENTS, PERMANENT, BUDGET):
    _stale.unlink(missing_ok=True)


def _request():
    from celery import current_task
    return current_task.request if current_task else None


def _job_and_deadline(request):
    args = list(getattr(request, "args", None) or [])
    kwargs = dict(getattr(request, "kwargs", None) or {})
    job = args[0] if args else kwargs.get("job_id")
    deadline = args[1] if len(args) > 1 else kwargs.get("deadline_epoch")
    return job, deadline


def _clock_time() -> float:
    return time.time() + _skew


def _instrument(task) -> None:
    """Once per process: wrap the module's fetch_snapshot and clock, and shrink the task's backoff."""
    global _skew
    if getattr(task, "_lab_probe", False):
        return
    task._lab_probe = True
    module_globals = getattr(task.run, "__globals__", {})
    original = module_globals.get("fetch_snapshot")
    if callable(original):
        def fetch_snapshot(*args, **kwargs):
            global _skew
            request = _request()
            job, deadline = _job_and_deadline(request)
            record("read", task_id=getattr(request, "id", None), job=job, retries=getattr(request, "retries", None),
                   args=list(args), kwargs=kwargs)
            try:
                if job in read_list(str(PERMANENT)):
                    raise ValueError("invalid export request")
                return original(*args, **kwargs)
            finally:
                if job in read_list(str(BUDGET)) and isinstance(deadline, (int, float)):
                    _skew = deadline - BUDGET_LEFT - time.time()
                    record("budget-used", task_id=getattr(request, "id", None), left=BUDGET_LEFT)
        module_globals["fetch_snapshot"] = fetch_snapshot
    # `import time` or `from time import time`: either name now reads the probe's clock.
    clocks = list(replace_time(module_globals, "time", _clock_time))
    knobs = {name: value for name, value in FAST_BACKOFF.items() if hasattr(task, name)}
    for name, value in knobs.items():
        setattr(task, name, value)
    record("knobs", **knobs, max_retries=task.max_retries, wrapped=callable(original), clocks=clocks)


def _previous_attempt_ended(task_id: str, attempt: int) -> bool:
    return bool(read_events(EVENTS, kind="end", task_id=task_id, retries=attempt))


def _eta_at(request) -> float | None:
    """The message's eta as epoch seconds, or None (the figure's only)."""
    eta = getattr(request, "eta", None)
    try:
        if isinstance(eta, str):
            eta = datetime.fromisoformat(eta)
        return eta.timestamp() if isinstance(eta, datetime) else None
    except (ValueError, OverflowError, OSError):
        return None


def _started(task, args, kwargs) -> dict:
    global _skew
    _instrument(task)
    _skew = 0.0
    attempt = task.request.retries
    waited_out = False
    if attempt:
        # A handshake, not a pause: the previous attempt's end event is written after its RETRY state is
        # stored, so every state this attempt stores lands after it.  (A pool child runs one task at a
        # time, so the previous attempt is in another child, and it needs nothing from this one.)
        task_id = task.request.id
        try:
            wait_until(lambda: _previous_attempt_ended(task_id, attempt - 1), PREVIOUS_ATTEMPT_WAIT,
                       f"attempt {attempt - 1} of {task_id} to end", interval=0.01)
        except WaitTimeout:
            waited_out = True
    return {"job": (args or [None])[0], "retries": attempt, "previous_unended": waited_out,
            "eta_at": _eta_at(task.request)}


def _retried(task, request, reason) -> dict:
    when = getattr(reason, "when", None)
    return {"retries": getattr(request, "retries", None),
            "when": when if isinstance(when, (int, float)) else repr(when),
            "exc": repr(getattr(reason, "exc", None)),
            **{name: getattr(task, name, None) for name in FAST_BACKOFF}}


def _ended(task, state, retval) -> dict:
    global _skew
    _skew = 0.0
    return {"retries": task.request.retries}


record_task_runs(record, started=_started, ended=_ended, retried=_retried, only=TASK_NAME)

from celery_app import app  # noqa: E402  the learner's app; the worker imports its include list

__all__ = ["app"]
