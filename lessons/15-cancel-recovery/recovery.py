"""Lesson 15: the recovery scan — find work that fell through the cracks and give it a bounded next chance.

    python recovery.py           one batch:  recovered N
    python recovery.py --loop    scan until Ctrl+C / SIGTERM (idle pauses are short)

One short transaction per batch (at most 50 jobs), locking jobs first and writing outbox rows second —
the same order as the publisher's confirm.  Nothing is sent, written to disk or waited for inside it.

What a batch does with each job it locks:

    cancel requested (queued, or running with an expired lease)  -> cancelled   reason user_cancelled
    deadline passed, or 3 real claims used up                   -> failed      + export_dead_letters row
    running, lease expired                                      -> queued      + new event, both +10 s
    queued, sent 60 s ago, never claimed, no unsent event       -> queued      + new event, due now

A running job whose lease is still live is never touched: its executor may still finish.  Recovery
never changes attempts — only a real claim counts one — so a requeue can never buy extra tries.
"""

import signal
import sys
import time
from uuid import uuid4

from state_store import MAX_ATTEMPTS, transaction

BATCH = 50                # jobs per transaction: short locks, bounded work per pass
LEASE_BACKOFF = 10        # seconds before a job whose executor vanished may be claimed again
UNCLAIMED_SECONDS = 60    # a dispatched job nobody claimed for this long gets one new event
RECOVERY_QUEUE = "exports.bulk"

# Three ways a job becomes recoverable; each starts with its status.  The index
# export_jobs_recovery_scan (status, updated_at, id) hands out those rows already in the ORDER BY below,
# so the server stops after one batch and locks only that batch.  FORCE INDEX pins that plan: with
# statistics that make a small table look cheaper to scan and sort, the server would otherwise lock
# every candidate — how many rows a locking read holds must not depend on statistics.
SCAN = """
    SELECT j.id, j.status, j.lease_token, j.attempts, j.cancel_requested,
           j.deadline_at<=NOW(6) AS expired
    FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)
    WHERE (j.status='running' AND j.lease_until<NOW(6))
       OR (j.status='queued'
           AND (j.cancel_requested=TRUE OR j.deadline_at<=NOW(6) OR j.attempts>=%(max)s))
       OR (j.status='queued' AND j.next_attempt_at<=NOW(6)
           AND j.cancel_requested=FALSE AND j.deadline_at>NOW(6) AND j.attempts<%(max)s
           -- an unsent event means a dispatch is already on its way: do not add another
           AND NOT EXISTS (SELECT 1 FROM export_outbox AS pending
                           WHERE pending.job_id=j.id AND pending.sent_at IS NULL)
           -- the last sign of life (change, due time, dispatch) is older than the unclaimed budget
           AND GREATEST(j.updated_at, j.next_attempt_at,
                        COALESCE(j.last_dispatched_at,
                                 (SELECT MAX(o.sent_at) FROM export_outbox AS o WHERE o.job_id=j.id),
                                 j.created_at))
               < DATE_SUB(NOW(6), INTERVAL %(unclaimed)s SECOND))
    -- status first: the index returns rows in this order, so only the rows returned get locked
    ORDER BY j.status, j.updated_at, j.id
    LIMIT %(batch)s FOR UPDATE SKIP LOCKED
"""


def decide(row: dict) -> tuple[str, str, int]:
    """(new status, reason, delay in seconds) for one locked job."""
    if row["cancel_requested"]:
        return "cancelled", "user_cancelled", 0
    if row["expired"]:
        return "failed", "deadline_exceeded", 0
    if row["attempts"] >= MAX_ATTEMPTS:
        return "failed", "attempts_exhausted", 0
    if row["status"] == "running":
        return "queued", "lease_expired", LEASE_BACKOFF
    return "queued", "dispatch_overdue", 0


def recover_batch() -> int:
    """Recover at most one batch; the number of jobs changed.  Commits everything or nothing."""
    with transaction() as cur:
        cur.execute(SCAN, {"max": MAX_ATTEMPTS, "unclaimed": UNCLAIMED_SECONDS, "batch": BATCH})
        rows = cur.fetchall()
        for row in rows:
            status, reason, delay = decide(row)
            # Compare-and-set on what we read: the row is locked, so a mismatch means a bug, not a race.
            # lease_token <=> %s: NULL-safe, a queued job has no token.
            cur.execute(
                """UPDATE export_jobs
                   SET status=%s, error_code=%s, lease_token=NULL, lease_until=NULL,
                       next_attempt_at=TIMESTAMPADD(SECOND, %s, NOW(6)), updated_at=NOW(6)
                   WHERE id=%s AND status=%s AND lease_token <=> %s""",
                (status, reason, delay, row["id"], row["status"], row["lease_token"]),
            )
            if cur.rowcount != 1:
                raise RuntimeError("a locked job changed under the recovery scan")
            if status == "failed":
                cur.execute("INSERT INTO export_dead_letters (job_id, reason) VALUES (%s, %s)",
                            (row["id"], reason))
                if cur.rowcount != 1:
                    raise RuntimeError("the dead letter was not recorded")
            elif status == "queued":
                # The event becomes due at the very moment the job does: the outbox and claim() both
                # hold the backoff, so neither a publisher nor a duplicate message can jump it.
                cur.execute("SELECT next_attempt_at FROM export_jobs WHERE id=%s", (row["id"],))
                due = cur.fetchone()
                if due is None:
                    raise RuntimeError("a recovered job vanished inside its own transaction")
                cur.execute(
                    "INSERT INTO export_outbox (id, job_id, queue_name, available_at) VALUES (%s, %s, %s, %s)",
                    (str(uuid4()), row["id"], RECOVERY_QUEUE, due["next_attempt_at"]),
                )
                if cur.rowcount != 1:
                    raise RuntimeError("the recovery event was not recorded")
    return len(rows)


def run_forever(idle_seconds: float = 2.0, error_pause: float = 5.0) -> None:
    """A supervised loop: a full batch is followed at once by the next, an empty one by a pause."""
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True  # finish the current batch, take no new one

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("recovery running", flush=True)
    while not stopping:
        try:
            count = recover_batch()
        except Exception as exc:  # database trouble: report it and try again later, never silently
            print(f"recovery failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            count = 0
            time.sleep(error_pause)
        if count:
            print("recovered", count, flush=True)
        if count < BATCH and not stopping:
            time.sleep(idle_seconds)
    print("recovery stopped", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--loop"]:
        run_forever()
    else:
        print("recovered", recover_batch())
