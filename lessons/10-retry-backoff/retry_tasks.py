"""Lesson 10: a read that may fail for a while, retried with a count, backoff, jitter and a deadline.

Worker (restart it after adding this module to include in celery_app.py):
    python -m celery -A celery_app:app worker -l INFO -Q exports --concurrency=2

The task only reads (no file, no side effect), so a retry repeats nothing but the read.
"""

import random
import time

from celery_app import app


class TemporaryReadError(Exception):
    """The source is briefly unavailable: trying again later may work."""


def fetch_snapshot(attempt: int, fail_until: int) -> list[dict]:
    # A drill stand-in for the real source: attempts 0 .. fail_until-1 fail, then it answers.
    # fail_until exists for local drills only; it is never part of a public API.
    if attempt < fail_until:
        raise TemporaryReadError("temporary source failure")
    return [{"id": 1, "name": "教学样品", "description": "", "is_active": False, "price_cents": 0}]


# backoff_base / backoff_max become attributes of the task: the wait before retry n is random in
# [0, min(backoff_max, backoff_base * 2**n)].  The defaults give caps of 1, 2, 4, 8 s; a drill can
# shrink both without touching the logic.
@app.task(bind=True, name="products.retry_demo", max_retries=3, backoff_base=1.0, backoff_max=8.0)
def retry_export(self, job_id: str, deadline_epoch: float, fail_until: int = 2) -> dict:
    # deadline_epoch: wall-clock seconds chosen once by the producer.  Every retry carries it
    # unchanged, so retries spend one shared budget instead of each getting a fresh one.
    remaining = deadline_epoch - time.time()
    if remaining <= 0:
        raise RuntimeError("export deadline exceeded")  # checked before the source is touched
    try:
        rows = fetch_snapshot(self.request.retries, fail_until)
    except TemporaryReadError as exc:  # only this type is worth waiting for
        if self.request.retries >= self.max_retries:
            raise  # max_retries counts retries: 1 + 3 executions in all, then the real error
        cap = min(self.backoff_max, self.backoff_base * 2.0 ** self.request.retries)
        delay = random.uniform(0, cap)  # full jitter: failed tasks do not come back in step
        if time.time() + delay + 0.1 >= deadline_epoch:
            # Not enough time left for the wait plus a minimal attempt: stop now, retries left or not.
            raise RuntimeError("insufficient retry budget") from exc
        # self.retry raises Retry itself; the raise makes the end of this path plain to see.
        raise self.retry(exc=exc, countdown=delay) from exc  # same args: the deadline travels along
    return {"job_id": job_id, "rows": len(rows)}
