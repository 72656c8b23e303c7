"""Runs in a probe next to the learner's modules (shared/probe.py): reading the state and result of the
learner's retry_export (sent through shared.lesson_celery.LearnerTask).  Plain data out.  (lab10_worker.py is
another thing: it runs in the worker.)"""

from shared.lesson_celery import learner_task


def outcome(task_id: str) -> dict:
    """AsyncResult(task_id) as the result backend has it now, without waiting: {"state": ...} plus either
    {"exception": "Type: message"} when its result is an exception, or {"value": the result}."""
    result = learner_task("retry_tasks:retry_export").AsyncResult(task_id)
    state, value = result.state, result.result
    if isinstance(value, BaseException):
        return {"state": state, "exception": f"{type(value).__name__}: {value}"}
    return {"state": state, "value": value}
