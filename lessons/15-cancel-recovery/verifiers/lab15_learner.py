"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 15's judge cannot make
by name — whether celery_app.py has an app, and a message sent with the learner's Celery app.  Plain data
out; the judge decides.  (publish_one() with its claim taken over: shared.learner_spies, lesson 12 too.)"""


def has_app() -> bool:
    import celery_app
    return getattr(celery_app, "app", None) is not None


def send_task(name: str, args: list, task_id: str, queue: str, ignore_result: bool = True) -> str:
    """app.send_task(...) with the learner's app (its broker settings): the message's id."""
    from celery_app import app
    app.send_task(name, args=args, task_id=task_id, queue=queue, ignore_result=ignore_result)
    return task_id

