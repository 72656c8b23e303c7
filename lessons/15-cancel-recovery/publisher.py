"""Lessons 12–15: the outbox publisher — claim one event, send it with no transaction open, confirm by token.

Lesson 13: each event carries its queue_name (exports.fast or exports.bulk, chosen at submit), and
the send goes to exactly that queue.  An explicit queue= on send_task beats any route or decorator
setting, so it is the one place that decides where the message lands.

Lesson 15: the confirm also records the job's last_dispatched_at, in the same transaction as sent_at.
The recovery scan reads that time to spot a job that was dispatched but never claimed, so only the
publisher whose claim is still current may move it: a stale one must not postpone recovery.  The
confirm locks the job row before the outbox row, the order the recovery scan uses too.

    python publisher.py           one event at most:  published True | published False (nothing due)
    python publisher.py --loop    keep publishing until Ctrl+C / SIGTERM (idle pauses are short)

Three steps, three separate moments:
1. claim_event   short transaction: lock one due event (SKIP LOCKED), write a claim token, commit
2. send          no transaction open: hand the message to the broker (may be slow, may fail)
3. confirm       short transaction: job row locked first; sent_at and the job's last_dispatched_at
                 are set only if our token still holds a live claim

A crash between 2 and 3 sends the event again once the claim expires: the outbox never loses an
event but may deliver one twice.  The consumer (export_tasks + lesson 11's claim/finish) makes the
repeat harmless, so keep those conditions there.
"""

import signal
import sys
import time
from uuid import uuid4

from celery_app import app
from state_store import transaction

CLAIM_SECONDS = 30  # a publisher that stops mid-send blocks its event for at most this long

# This process only publishes, so it fails fast: one reconnect after half a second instead of
# kombu's default ~6 s of connection retries while we hold a claim.  A failed send leaves the
# event unsent for a later run.  (The worker keeps its own patient reconnect settings.)
app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                     "max_retries": 1, "interval_start": 0.5}

# "Due and free": never sent, available, and nobody holds a live claim.  Used by the lock and the
# claim UPDATE alike, so the UPDATE cannot take a row that changed in between.
DUE = """sent_at IS NULL AND available_at<=NOW(6)
         AND (claim_until IS NULL OR claim_until<NOW(6))"""


def claim_event() -> dict | None:
    """Claim the oldest due event: {id, job_id, queue_name, claim_token}, or None when nothing is due."""
    token = str(uuid4())
    with transaction() as cur:
        # LIMIT comes before FOR UPDATE SKIP LOCKED.  A row another publisher is claiming is skipped,
        # not waited for.  export_outbox_pending (sent_at, created_at, id) serves this WHERE and
        # ORDER BY, so only the row returned gets locked (see schema_outbox.sql and the guide).
        cur.execute(f"""SELECT id, job_id, queue_name FROM export_outbox
                        WHERE {DUE}
                        ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED""")
        event = cur.fetchone()
        if event is None:
            return None
        cur.execute(
            f"""UPDATE export_outbox
                SET claim_token=%s, claim_until=DATE_ADD(NOW(6), INTERVAL %s SECOND), attempts=attempts+1
                WHERE id=%s AND {DUE}""",
            (token, CLAIM_SECONDS, event["id"]),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the outbox event stopped matching inside its own locked transaction")
        event["claim_token"] = token
    return event  # committed: the row lock is gone before any network call


def publish_one() -> bool:
    """Send at most one event.  True: sent and confirmed.  False: nothing due, or our claim was lost.

    A failed send raises and leaves sent_at NULL: the event goes out again after its claim expires.
    """
    event = claim_event()
    if event is None:
        return False
    # The event id is the task id, so every copy of this event carries the same id in logs.
    # retry=False: fail now rather than block in kombu's own retry loop while we hold a claim.
    # ignore_result=True: the job's state lives in MySQL; without it Celery first subscribes to the
    # Redis result backend and, with Redis down, retries that for ~20 s before the send even starts.
    # queue=event["queue_name"]: the route stored with the event, the same on every re-send.
    app.send_task("products.export", args=[event["job_id"]], task_id=event["id"],
                  queue=event["queue_name"], retry=False, ignore_result=True)
    # A deadlock or a lost connection here raises: the send happened but is unconfirmed, so the event
    # goes out again after its claim expires.  Never report an unknown outcome as confirmed.
    with transaction() as cur:
        # Job first, outbox second — the recovery scan's order, so the two wait on each other in
        # one direction only instead of deadlocking.
        cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE", (event["job_id"],))
        if cur.fetchone() is None:
            raise RuntimeError("the outbox event refers to a job that does not exist")
        cur.execute(
            """UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL
               WHERE id=%s AND job_id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)""",
            (event["id"], event["job_id"], event["claim_token"]),
        )
        # 0 rows: our claim expired and another publisher took over (it will confirm its own send).
        # Then the dispatch time is not ours to move either.
        confirmed = cur.rowcount == 1
        if confirmed:
            # The job row is locked by us (above), so this cannot miss it.
            cur.execute("UPDATE export_jobs SET last_dispatched_at=NOW(6) WHERE id=%s", (event["job_id"],))
    return confirmed  # committed: sent_at and last_dispatched_at together, or neither


def run_forever(idle_seconds: float = 0.5, error_pause: float = 2.0) -> None:
    """A deployable loop: drain what is due, pause briefly when idle, stop cleanly on SIGTERM."""
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("publisher running", flush=True)
    while not stopping:
        try:
            busy = publish_one()
        except Exception as exc:  # broker or database trouble: report it, keep the loop alive
            print(f"publish failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            busy = False
            time.sleep(error_pause)
        if not busy and not stopping:
            time.sleep(idle_seconds)
    print("publisher stopped", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--loop"]:
        run_forever()
    else:
        print("published", publish_one())
