"""Lesson 05: a Future that times out is not a function that stopped.

Run it with   python pool_io.py
It prints "wait timed out; cancel: False", "queued cancel: True",
"worker result: {'id': 1, 'cancelled': True}" and finally "pool closed".

read_sync stands in for a blocking call from a synchronous SDK.  A real SDK
call needs its own connect/read timeout; the 0.1 s slices here only make the
stop request visible.
"""

import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError
from threading import Event


def read_sync(product_id, stop):
    """About 2 s of blocking work, cut into 20 slices; gives up at the next slice once stop is set."""
    for _ in range(20):
        if stop.is_set():
            return {"id": product_id, "cancelled": True}
        time.sleep(0.1)
    return {"id": product_id, "cancelled": False}


if __name__ == "__main__":
    stop = Event()
    with ThreadPoolExecutor(max_workers=1) as pool:  # one worker, one long job: nothing piles up
        future = pool.submit(read_sync, 1, stop)
        queued = pool.submit(read_sync, 2, stop)  # exercise: waits behind the first, never started
        try:
            print(future.result(timeout=0.2))  # bounds how long *we* wait, not how long it runs
        except TimeoutError:
            print("wait timed out; cancel:", future.cancel())  # False: it is already running
            print("queued cancel:", queued.cancel())  # True: withdrawn before it started
            stop.set()  # the only thing that ends the running call: it checks the event
            print("worker result:", future.result(timeout=1))
    # Leaving the with block waited for the worker thread; only now is the pool really closed.
    print("pool closed")
