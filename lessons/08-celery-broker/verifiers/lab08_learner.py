"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 08's judge cannot make
by name — sending a snapshot with the learner's export_products, waiting on its
result, reading its Celery state.  Plain data out (or what was raised, rebuilt by the judge); the judge
decides."""


def _task():
    from export_tasks import export_products
    return export_products


def send(job_id: str, rows: list, task_id: str) -> str:
    """export_products.apply_async(args=[job_id, rows], task_id=task_id): the message's id."""
    return _task().apply_async(args=[job_id, rows], task_id=task_id).id


def result(task_id: str, seconds: float):
    """AsyncResult(task_id).get(timeout=seconds): the task's return value.  What get raises (the task's own
    error, Celery's TimeoutError) is raised here too, and rebuilt on the judge's side."""
    return _task().AsyncResult(task_id).get(timeout=seconds)


def state(task_id: str) -> str:
    """AsyncResult(task_id).state, as the learner's result backend has it."""
    return _task().AsyncResult(task_id).state
