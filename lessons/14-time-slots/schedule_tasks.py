"""Lesson 14: the periodic signal.  beat only sends products.schedule_tick; the worker decides the slot.

    beat (one process)   every 60 s: products.schedule_tick → queue exports.fast  (celery_app.py)
    fast worker          schedule_tick: slot = the UTC minute it STARTS running → schedule_once
    publisher.py         the slot's outbox event → products.export on exports.bulk
    bulk worker          claim → file → finish (lesson 11)

The slot is named after the minute the tick is executed, not the minute beat meant: a tick that waits
in the queue across a minute boundary lands in the next slot, and minutes without any tick (beat
stopped) simply have no slot.  That is this lesson's model — see verify_schedule_slots.py.
"""

import logging
from datetime import datetime, timezone

from celery_app import app
from schedule_store import schedule_once
from state_store import CapacityExceeded, transaction

SLOT_FORMAT = "shop-export:%Y%m%dT%H%M"  # one slot per UTC minute
TICK_PRODUCTS = 100                      # the snapshot a tick exports: the first 100 products by id

log = logging.getLogger(__name__)


def execution_slot(when: datetime) -> str:
    """The slot name for a moment: its UTC minute.  A naive datetime is refused, never guessed."""
    if not isinstance(when, datetime):
        raise ValueError("a datetime is required")
    # utcoffset() is None for a naive value — and for a tzinfo that cannot say its offset.
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("timezone-aware timestamp required")
    # Converted first: 18:00+08:00 and 10:00Z are the same instant and must be the same slot.
    return when.astimezone(timezone.utc).strftime(SLOT_FORMAT)


@app.task(name="products.schedule_tick")
def schedule_tick() -> str | None:
    """One beat signal: the job_id created for this minute, or None (slot taken, no products, or full)."""
    slot = execution_slot(datetime.now(timezone.utc))
    with transaction() as cur:
        cur.execute("SELECT id FROM products ORDER BY id LIMIT %s", (TICK_PRODUCTS,))
        ids = [row["id"] for row in cur.fetchall()]
    if not ids:
        log.warning("schedule tick %s: no products, nothing to export", slot)
        return None
    try:
        return schedule_once(slot, ids)
    except CapacityExceeded:
        # This minute is skipped, not postponed: nobody creates it later.  Say so in the log.
        log.warning("schedule tick %s skipped: export capacity reached", slot)
        return None
