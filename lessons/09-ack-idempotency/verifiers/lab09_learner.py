"""Runs in a probe next to the learner's modules (shared/probe.py): what lesson 09's judge asks of the
learner's export_products and app.  Plain data out (or what was raised, rebuilt by the judge)."""


def _task():
    from export_tasks import export_products
    return export_products


def send(job_id: str, rows: list, task_id: str, queue: str | None = None) -> str:
    options = {"queue": queue} if queue else {}
    return _task().apply_async(args=[job_id, rows], task_id=task_id, **options).id


def result(task_id: str, seconds: float):
    """AsyncResult(task_id).get(timeout=seconds): the task's return value.  What get raises (the task's own
    error, Celery's TimeoutError) is raised here too, and rebuilt on the judge's side."""
    return _task().AsyncResult(task_id).get(timeout=seconds)


def state(task_id: str) -> str:
    return _task().AsyncResult(task_id).state


def control(node: str, method: str, arguments: dict) -> dict:
    """One control broadcast through the learner's app to `node` (inspect <method>, replies collected for
    3 s at most): the replies by node name, {} when none came."""
    from celery_app import app
    return getattr(app.control.inspect(destination=[node], timeout=3), method)(**arguments) or {}
