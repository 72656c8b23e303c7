"""Lesson 14, step 5: the slot model's boundary, shown with two fixed UTC moments (no waiting for the clock).

    python verify_schedule_slots.py
    same-redelivered-signal {'first': '…', 'same_slot': None, 'later_slot': '…'}

One simulated signal ("same-redelivered-signal") is executed three times: twice in the minute 10:00
and once, as if redelivered late, at 10:01.  The slot comes from the execution minute, so:
  10:00:59 → new slot, a job        10:00:59 again → same slot, None        10:01:01 → new slot, a job
Two jobs for one signal: this model merges per execution minute, it is NOT exactly-once per signal.
Both jobs and their outbox events stay in the database; a running publisher and worker export them.
"""

from datetime import datetime, timezone
from uuid import uuid4

from schedule_store import schedule_once
from schedule_tasks import execution_slot
from state_store import transaction


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")  # a product that exists; never assume id=1
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")

    prefix = f"drill:{uuid4()}:"  # fresh every run: never mixed with real ticks or earlier drills
    delivery_label = "same-redelivered-signal"
    late_in_minute = datetime(2026, 1, 1, 10, 0, 59, tzinfo=timezone.utc)
    next_minute = datetime(2026, 1, 1, 10, 1, 1, tzinfo=timezone.utc)  # two seconds later

    first = schedule_once(prefix + execution_slot(late_in_minute), [product_id])
    same_slot = schedule_once(prefix + execution_slot(late_in_minute), [product_id])
    later_slot = schedule_once(prefix + execution_slot(next_minute), [product_id])

    assert first is not None and same_slot is None, "the same slot must be merged"
    assert later_slot is not None and later_slot != first, "the next minute must be a new slot with its own job"
    print(delivery_label, {"first": first, "same_slot": same_slot, "later_slot": later_slot})


if __name__ == "__main__":
    main()
