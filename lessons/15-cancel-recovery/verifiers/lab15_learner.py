"""Runs in a probe next to the learner's modules (shared/probe.py): the calls lesson 15's judge cannot make
by name — whether celery_app.py has an app, a message sent with the learner's Celery app, and publish_one()
with its event's claim taken over by another publisher right after the learner's claim_event.  Plain data
out; the judge decides."""

from uuid import uuid4


def has_app() -> bool:
    import celery_app
    return getattr(celery_app, "app", None) is not None


def send_task(name: str, args: list, task_id: str, queue: str, ignore_result: bool = True) -> str:
    """app.send_task(...) with the learner's app (its broker settings): the message's id."""
    from celery_app import app
    app.send_task(name, args=args, task_id=task_id, queue=queue, ignore_result=ignore_result)
    return task_id


def publish_after_takeover(event_id: str):
    """publisher.publish_one() while its claim_event is wrapped: once the learner's claim returns this event,
    the kit claims it for another publisher (a new claim_token, 30 s ahead), as if ours ran out while we
    sent.  publish_one's return value; claim_event is put back afterwards."""
    import publisher

    from shared.lesson_db import sql
    real_claim = publisher.claim_event

    def claim_then_lose():
        claimed = real_claim()
        if claimed is not None and str(claimed.get("id")) == event_id:
            # Our claim ran out while we sent; another publisher claimed the event after us.
            sql("UPDATE export_outbox SET claim_token=%s, claim_until=DATE_ADD(NOW(6), INTERVAL 30 SECOND) "
                "WHERE id=%s", (str(uuid4()), event_id))
        return claimed

    publisher.claim_event = claim_then_lose
    try:
        return publisher.publish_one()
    finally:
        publisher.claim_event = real_claim
