"""Lesson 02: read 20 products with bounded asyncio work.

Run:  python bounded_async.py        ->  four "consumer closed" lines, then "completed 20"

Three separate limits, each with its own job:
  - QUEUE_SIZE  ids waiting in memory (the producer waits at put when it is full)
  - CONSUMERS   task objects alive at once (fixed, not one per product)
  - READ_SLOTS  reads talking to the product API at the same moment
"""

import asyncio

QUEUE_SIZE = 4
CONSUMERS = 4
READ_SLOTS = 2
BATCH_BUDGET = 3  # seconds for the whole batch, not per read

# Exercise: how many reads are running right now, and the most seen at once.
# Both must respect READ_SLOTS; in_flight returns to 0 on every path.
in_flight = 0
peak = 0


async def read_product(product_id: int) -> dict:
    """Pretend to call the product API (a real call also needs connect/read timeouts)."""
    global in_flight, peak
    in_flight += 1
    peak = max(peak, in_flight)
    try:
        await asyncio.sleep(0.1)  # the network wait; other tasks run meanwhile
    finally:
        # finally: a cancelled or failed read must still give its count back.
        in_flight -= 1
    return {
        "id": product_id,
        "name": f"商品-{product_id}",
        "description": "教学样品",
        "is_active": False,
        "price_cents": 0,
    }


async def collect_products(product_ids) -> dict[int, dict]:
    """Read every id with a fixed set of consumers; any failure or cancel stops the whole batch."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUE_SIZE)
    slots = asyncio.Semaphore(READ_SLOTS)
    results: dict[int, dict] = {}  # keyed by product_id, so a row can never land on the wrong id

    async def consume() -> None:
        try:
            while True:
                product_id = await queue.get()
                try:
                    if product_id is None:  # sentinel: no more work for this consumer
                        return
                    async with slots:  # hold a slot only around the read itself
                        results[product_id] = await read_product(product_id)
                finally:
                    # Settle the item even when the read failed or was cancelled,
                    # otherwise queue.join() would wait for it forever.
                    queue.task_done()
        finally:
            print("consumer closed")

    async with asyncio.TaskGroup() as group:
        for _ in range(CONSUMERS):
            group.create_task(consume())
        for product_id in product_ids:
            await queue.put(product_id)  # waits here while the queue is full
        for _ in range(CONSUMERS):
            await queue.put(None)  # one sentinel per consumer
        await queue.join()
    # Reached only when every consumer finished cleanly: the dict is complete.
    return results


async def main() -> None:
    try:
        async with asyncio.timeout(BATCH_BUDGET):
            rows = await collect_products(range(20))
    except TimeoutError:
        # The deadline cancelled the batch.  There is no partial list to report.
        print("batch timed out")
        return
    print("completed", len(rows))


if __name__ == "__main__":
    asyncio.run(main())
