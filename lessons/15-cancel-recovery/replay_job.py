"""Lesson 15: replay ONE failed job, after its cause is fixed, as a brand-new job.

    python replay_job.py <failed job id>     prints the new job's id

The failed job, its attempts and its export_dead_letters row stay exactly as they are: they are the
evidence of what went wrong.  The new job copies the frozen payload (the same input as the failed
run), points back with replay_of, gets a fresh deadline and its own outbox event — all in one
transaction, after passing the same admission gate as every other way in (lesson 13).

Replay one id at a time, by hand.  Replaying in bulk needs proof that the cause is gone first.
"""

import json
import sys
from uuid import UUID, uuid4

from state_store import DEADLINE_MINUTES, admit_export, decode_payload, transaction


def replay(old_id: str) -> str:
    """Create the replay of a failed job; its new id.  ValueError if old_id is not a failed job."""
    old_id = str(UUID(old_id))  # a malformed id stops here, before any database work
    new_id = str(uuid4())
    with transaction() as cur:
        admit_export(cur)  # gate first (the lock order of every submit path), then the source row
        cur.execute("SELECT id, payload FROM export_jobs WHERE id=%s AND status='failed' FOR UPDATE",
                    (old_id,))
        old = cur.fetchone()
        if old is None:
            raise ValueError("no failed job with this id (only failed jobs can be replayed)")
        payload = decode_payload(old["payload"])
        cur.execute(
            "INSERT INTO export_jobs (id, payload, replay_of, deadline_at) "
            "VALUES (%s, %s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (new_id, json.dumps(payload, ensure_ascii=False), old_id, DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the replay job was not created")
        cur.execute("INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, 'exports.bulk')",
                    (str(uuid4()), new_id))
        if cur.rowcount != 1:
            raise RuntimeError("the replay event was not created")
    return new_id  # committed: the publisher sends it like any other event


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python replay_job.py <failed job id>")
    try:
        print(replay(sys.argv[1]))
    except ValueError as exc:
        raise SystemExit(f"not replayed: {exc}") from None
