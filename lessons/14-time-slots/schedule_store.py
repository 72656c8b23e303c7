"""Lesson 14: at most one scheduled export per time slot — the slot table remembers who came first.

    schedule_once("shop-export:20260101T1000", [3, 7])  -> job_id   (job + slot + outbox event, one commit)
    schedule_once("shop-export:20260101T1000", [3, 7])  -> None     (that slot already has its job)

One transaction, four moves, in this order:

1. lock the admission gate (lesson 13)  every scheduled creation lines up on the same row, so two
                                        callers can never both find "no slot yet" and both insert
2. look the slot up                     already there: return None at once — before any capacity
                                        check, so a repeated signal is never mistaken for overload
3. admit_export                         only a new slot still has to fit under the limit
4. job → slot → outbox                  MySQL checks foreign keys statement by statement: the job row
                                        must exist before the slot and the event can point at it

Any exception leaves the with-block and rolls all three rows back: never catch a duplicate-key error
and carry on, or the job inserted a moment earlier commits without its slot.
"""

import json
from uuid import uuid4

from state_store import admit_export, lock_admission, read_snapshot, transaction

SLOT_KEY_MAX = 160              # export_schedule_slots.slot_key is VARCHAR(160) CHARACTER SET ascii
SCHEDULED_QUEUE = "exports.bulk"  # a scheduled snapshot is a long export: it never competes with fast
DEADLINE_MINUTES = 10           # like a submitted job: after this it may no longer publish


def check_slot_key(slot_key) -> str:
    """Refuse a bad slot name before any connection is opened: nothing can be half-written."""
    if not isinstance(slot_key, str):
        raise ValueError("slot_key must be a string")
    # Checked here rather than left to the column: the database would only complain at the slot
    # INSERT, after the job row — and a server not in strict mode would even truncate silently.
    if not slot_key.isascii() or not 1 <= len(slot_key) <= SLOT_KEY_MAX:
        raise ValueError(f"slot_key must be 1..{SLOT_KEY_MAX} ASCII characters")
    return slot_key


def schedule_once(slot_key: str, product_ids: list[int]) -> str | None:
    """Create this slot's export job and its outbox event, or return None if the slot has one already.

    CapacityExceeded (lesson 13) is raised only for a NEW slot when the gate is full.
    """
    slot_key = check_slot_key(slot_key)
    job_id = str(uuid4())
    with transaction() as cur:
        # 1. The gate first: whoever holds it is the only one checking and inserting right now.
        lock_admission(cur)
        # 2. The slot check, under the gate.  FOR UPDATE reads the latest committed row.
        cur.execute("SELECT job_id FROM export_schedule_slots WHERE slot_key=%s FOR UPDATE", (slot_key,))
        if cur.fetchone() is not None:
            return None  # nothing written in this transaction: leaving the with-block just commits nothing
        # 3. A new slot needs a place.  admit_export locks the gate again: same transaction, no-op.
        admit_export(cur)
        rows = read_snapshot(cur, product_ids)  # bad product ids raise here: still nothing written
        # 4. job → slot → outbox, all in this transaction.
        cur.execute(
            "INSERT INTO export_jobs (id, payload, deadline_at) "
            "VALUES (%s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (job_id, json.dumps(rows, ensure_ascii=False), DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the scheduled job insert did not create exactly one row")
        # The primary key is the backstop: if a caller skipped the gate, this raises and rolls back.
        cur.execute("INSERT INTO export_schedule_slots (slot_key, job_id) VALUES (%s, %s)", (slot_key, job_id))
        if cur.rowcount != 1:
            raise RuntimeError("the schedule slot insert did not create exactly one row")
        cur.execute(
            "INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, %s)",
            (str(uuid4()), job_id, SCHEDULED_QUEUE),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the scheduled outbox insert did not create exactly one row")
    return job_id  # committed: publisher.py may now announce it
