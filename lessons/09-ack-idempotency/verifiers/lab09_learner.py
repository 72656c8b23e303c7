"""Runs in a probe next to the learner's modules (shared/probe.py): the control command lesson 09's judge
sends through the learner's app (its task is used through shared.lesson_celery.LearnerTask).  Plain data out."""


def control(node: str, method: str, arguments: dict) -> dict:
    """One control broadcast through the learner's app to `node` (inspect <method>, replies collected for
    3 s at most): the replies by node name, {} when none came."""
    from celery_app import app
    return getattr(app.control.inspect(destination=[node], timeout=3), method)(**arguments) or {}
