"""Lesson 05: bound the futures, not only the threads.

Run it with   python batch_io.py      (prints 8 after about 8 s: each read takes 2 s)

max_workers=2 limits how many reads run at once; it does not limit how many
futures wait in the pool's queue.  Submitting 4 at a time and draining them
before the next 4 keeps that queue (and its memory) bounded too.
"""

from concurrent.futures import ThreadPoolExecutor, as_completed
from threading import Event

from pool_io import read_sync

BATCH = 4


def export_batches(product_ids):
    stop = Event()
    results = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for start in range(0, len(product_ids), BATCH):
            batch = product_ids[start:start + BATCH]
            futures = [pool.submit(read_sync, item, stop) for item in batch]
            # as_completed hands results back in finishing order, not input order.
            for future in as_completed(futures):
                results.append(future.result())
    return results


if __name__ == "__main__":
    print(len(export_batches(list(range(8)))))
