"""Lesson 15, step 5: duplicate messages cannot jump the durable backoff in next_attempt_at.

Stop your publisher and workers first (this script only touches the job it creates).  It puts the
job's next_attempt_at 10 s ahead and claims twice, as two duplicate messages would: both get None and
attempts stays 0.  Once the database says the job is due, one claim succeeds with attempts 1.

    python verify_retry_gate.py
    persistent retry gate verified <job id>

The job is left running under a real lease: let the lease run out and the recovery scan requeue it
rather than faking a result file.
"""

import time

from state_store import claim, submit_snapshot, transaction

BACKOFF_SECONDS = 10


def attempts_of(job_id: str) -> int:
    with transaction() as cur:
        cur.execute("SELECT attempts FROM export_jobs WHERE id=%s", (job_id,))
        return cur.fetchone()["attempts"]


def wait_until_due(job_id: str, bound: float) -> None:
    """Poll the database's own clock (not ours) until the job is due; give up after `bound` seconds."""
    give_up = time.monotonic() + bound
    while True:
        with transaction() as cur:
            cur.execute("SELECT next_attempt_at<=NOW(6) AS due FROM export_jobs WHERE id=%s", (job_id,))
            if cur.fetchone()["due"]:
                return
        if time.monotonic() > give_up:
            raise SystemExit(f"job {job_id} was still not due after {bound:g} s")
        time.sleep(0.5)


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")
    job_id = submit_snapshot([product_id])
    with transaction() as cur:
        cur.execute("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL %s SECOND) WHERE id=%s",
                    (BACKOFF_SECONDS, job_id))

    assert claim(job_id) is None, "a duplicate claimed the job before next_attempt_at"
    assert claim(job_id) is None, "a second duplicate claimed the job before next_attempt_at"
    assert attempts_of(job_id) == 0, "refused claims must not count as attempts"

    wait_until_due(job_id, BACKOFF_SECONDS + 5)
    job = claim(job_id)
    assert job is not None and job["attempts"] == 1, f"the claim after the backoff should have attempts 1, got {job}"
    print("persistent retry gate verified", job_id)


if __name__ == "__main__":
    main()
