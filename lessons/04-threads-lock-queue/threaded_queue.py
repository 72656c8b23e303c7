"""Lesson 04: two threads share one bounded queue and one small lock.

Run it with   python threaded_queue.py
It prints {'done': 19, 'failed': 1} [(7, 'ValueError')], then how long the
producer's longest put() waited, and returns to the prompt.

With the exercise done, as here: capacity 1 and 0.2 s per id (the course's
steps start with 4 and 0.05 s), so the producer's put() visibly waits.

The Lock guards the counters of *this process* only.  It is not a database row
lock and it cannot coordinate several workers or machines.
"""

from queue import Queue
from threading import Lock, Thread
import time

pending = Queue(maxsize=1)  # exercise: 1 id waits here (was 4); put() blocks when it is full
mutex = Lock()              # held only while the counters change
counts = {"done": 0, "failed": 0}
errors = []                 # (product_id, exception class name), one per failed id


def consume():
    """Take ids until a None arrives; every get() is settled with exactly one task_done()."""
    while True:
        product_id = pending.get()
        try:
            if product_id is None:
                return  # the stop signal; finally still settles this get()
            time.sleep(0.2)  # exercise: 0.2 s per id (was 0.05); the slow part runs with no lock held
            if product_id == 7:
                raise ValueError("product 7 is broken on purpose")
            with mutex:
                counts["done"] += 1
        except Exception as exc:
            # A failure is a result too: count it and say which id failed and why.
            with mutex:
                counts["failed"] += 1
                errors.append((product_id, type(exc).__name__))
        finally:
            pending.task_done()


if __name__ == "__main__":
    threads = [Thread(target=consume) for _ in range(2)]  # not daemon: the exit path stays visible
    for thread in threads:
        thread.start()

    longest_put = 0.0
    for product_id in range(20):
        started = time.perf_counter()
        pending.put(product_id)  # waits while the queue is full: back-pressure on the producer
        longest_put = max(longest_put, time.perf_counter() - started)
    for _ in threads:
        pending.put(None)  # one stop signal per consumer

    pending.join()  # every get() has had its task_done() ...
    for thread in threads:
        thread.join()  # ... and every consumer has returned
    print(counts, errors)
    print(f"longest put wait: {longest_put:.2f}s")

    # Acceptance: every id ended somewhere, no thread is left, and each failure has its error.
    assert counts["done"] + counts["failed"] == 20
    assert all(not thread.is_alive() for thread in threads)
    assert len(errors) == counts["failed"]
