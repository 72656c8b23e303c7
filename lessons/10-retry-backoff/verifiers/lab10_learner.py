"""Runs in a probe next to the learner's modules (shared/probe.py): sending with the learner's retry_export,
reading its state and result.  Plain data out.  (lab10_probe.py is another thing: it runs in the worker.)"""


def _task():
    from retry_tasks import retry_export
    return retry_export


def send(job_id: str, deadline: float, fail_until: int) -> str:
    """retry_export.apply_async(args=[job_id, deadline, fail_until]): the message's id (Celery's own)."""
    return _task().apply_async(args=[job_id, deadline, fail_until]).id


def outcome(task_id: str) -> dict:
    """AsyncResult(task_id) as the result backend has it now, without waiting: {"state": ...} plus either
    {"exception": "Type: message"} when its result is an exception, or {"value": the result}."""
    result = _task().AsyncResult(task_id)
    state, value = result.state, result.result
    if isinstance(value, BaseException):
        return {"state": state, "exception": f"{type(value).__name__}: {value}"}
    return {"state": state, "value": value}
