"""Lesson 11, step 6: a lease that expired is not a licence — recovery first, then a new token.

Run:  python verify_lease.py        ->  lease ownership verified <job_id>

Works on a job of its own (never on someone else's row).  The expiry is not waited out: an
UPDATE moves lease_until into the past.  The recovery transition written out here is the one
lesson 15's scanner performs (running + expired lease -> queued, attempts kept).
"""

import json
from pathlib import Path

from state_store import claim, finish, submit_snapshot, transaction


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")
    job_id = submit_snapshot([product_id])

    old = claim(job_id)
    assert old is not None and old["attempts"] == 1, "a fresh queued job must be claimable once"
    assert claim(job_id) is None, "a second claim during a live lease must get nothing"

    with transaction() as cur:  # the lease runs out (moved, not waited for)
        cur.execute("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s",
                    (job_id,))
    assert claim(job_id) is None, "an expired running job must not be claimable before recovery"
    assert finish(job_id, old["lease_token"], "unused") is False, "an expired lease must not publish"

    with transaction() as cur:  # the recovery transition: back to queued, attempts unchanged
        cur.execute("""UPDATE export_jobs SET status='queued', lease_token=NULL, lease_until=NULL,
                              next_attempt_at=NOW(6), updated_at=NOW(6)
                       WHERE id=%s AND status='running' AND lease_until<NOW(6)""", (job_id,))
        assert cur.rowcount == 1, "the recovery transition must move exactly this job"

    new = claim(job_id)
    assert new is not None and new["attempts"] == 2, "the claim after recovery is attempt 2"
    assert new["lease_token"] != old["lease_token"]
    assert finish(job_id, old["lease_token"], "unused") is False, "the old token must stay powerless"

    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    target = folder / f"{job_id}.{new['lease_token']}.json"
    target.write_text(json.dumps(new["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")
    assert finish(job_id, new["lease_token"], str(target)) is True, "the current token must publish"
    print("lease ownership verified", job_id)


if __name__ == "__main__":
    main()
