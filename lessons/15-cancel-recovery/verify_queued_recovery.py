"""Lesson 15, step 6: a job whose event was sent but never claimed gets exactly ONE new event.

Stop your publisher and workers first (this script only touches the job it creates).  It pretends the
message was lost after a confirmed send: the event is marked sent 61 s ago, the job's dispatch time
too, and no message is sent at all.  Then two scans run: the first adds one unsent event, the second
sees that event and adds nothing.  attempts stays 0 — a re-dispatch is not an execution.

    python verify_queued_recovery.py
    queued delivery recovery verified <job id>

Afterwards start the publisher and the workers again and follow that job id to succeeded.
"""

from recovery import recover_batch
from state_store import submit_snapshot, transaction


def unsent_events(job_id: str) -> int:
    with transaction() as cur:
        cur.execute("SELECT COUNT(*) AS n FROM export_outbox WHERE job_id=%s AND sent_at IS NULL", (job_id,))
        return cur.fetchone()["n"]


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")  # a product that exists; never assume id 1
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")
    job_id = submit_snapshot([product_id])

    with transaction() as cur:
        # job first, outbox second: the lock order of the publisher and the scan
        cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE", (job_id,))
        if cur.fetchone() is None:
            raise SystemExit("the new job is missing")
        cur.execute("UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND), claim_until=NULL "
                    "WHERE job_id=%s", (job_id,))
        cur.execute("""UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND),
                              updated_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND),
                              next_attempt_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND)
                       WHERE id=%s""", (job_id,))

    recover_batch()
    assert unsent_events(job_id) == 1, "the first scan should add exactly one unsent event"
    recover_batch()
    assert unsent_events(job_id) == 1, "a second scan added another event although one is still unsent"
    with transaction() as cur:
        cur.execute("SELECT status, attempts FROM export_jobs WHERE id=%s", (job_id,))
        job = cur.fetchone()
    assert job["status"] == "queued" and job["attempts"] == 0, f"expected queued with attempts 0, got {job}"
    print("queued delivery recovery verified", job_id)


if __name__ == "__main__":
    main()
