"""Lesson 05 mutants: plausible mistakes with Futures, stop events, batching and to_thread."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 05.1: the wait times out, cancel() on the running future is False
    Mutant(
        name="05-cancelled-instead-of-cancel",
        file="pool_io.py",
        old='print("wait timed out; cancel:", future.cancel())',
        new='print("wait timed out; cancel:", future.cancelled())',
        fails=("05.1",),
        why="cancelled() only asks and prints the same False; cancel() is never requested, so the "
            "lesson's point (a running job cannot be cancelled) is never tested.",
    ),
    Mutant(
        name="05-result-without-timeout",
        file="pool_io.py",
        old="print(future.result(timeout=0.2))",
        new="print(future.result())",
        fails=("05.1", "05.2", "05.5"),
        why="Pitfall: result() without a timeout waits the full 2 s; nothing times out, stop is never set "
            "and the queued job is never withdrawn (it runs another 2 s).",
    ),
    # ---- 05.2: stop.set() ends the worker, the pool closes
    Mutant(
        name="05-stop-never-set",
        file="pool_io.py",
        old="            stop.set()  # the only thing that ends the running call: it checks the event\n",
        new="",
        fails=("05.2",),
        why="Cancelling the wait without setting stop: the worker reads on, result(timeout=1) raises "
            "TimeoutError and leaving the with block still waits for the full read.",
    ),
    Mutant(
        name="05-stopped-reports-finished",
        file="pool_io.py",
        old='            return {"id": product_id, "cancelled": True}\n',
        new='            return {"id": product_id, "cancelled": False}\n',
        fails=("05.2",),
        why="A stopped read that reports cancelled=False looks like a complete result to the caller.",
    ),
    Mutant(
        name="05-stop-flag-never-checked",
        file="pool_io.py",
        old=('        if stop.is_set():\n'
             '            return {"id": product_id, "cancelled": True}\n'),
        new="",
        fails=("05.2", "05.4"),
        why="Pitfall: a loop that never looks at the event cannot stop cooperatively, neither in the pool "
            "nor under to_thread.",
    ),
    Mutant(
        name="05-pool-never-shut-down",
        file="pool_io.py",
        old="    with ThreadPoolExecutor(max_workers=1) as pool:  # one worker, one long job: nothing piles up\n",
        new="    pool = ThreadPoolExecutor(max_workers=1)  # one worker, one long job: nothing piles up\n"
            "    if pool:\n",
        fails=("05.2",),
        why="A pool made without with and never shut down: pool closed is printed while its worker thread lives on; "
            "the diagnosis says so and its hint is about with/shutdown(), not stop.is_set().",
        says=(("05.2", "the pool was never shut down before pool closed was printed"),),
        hints=(("05.2", "Create the pool with `with ThreadPoolExecutor"),),
    ),
    # ---- 05.3: at most 4 futures outstanding, at most 2 running
    Mutant(
        name="05-submit-all-at-once",
        file="batch_io.py",
        old=('        for start in range(0, len(product_ids), BATCH):\n'
             '            batch = product_ids[start:start + BATCH]\n'
             '            futures = [pool.submit(read_sync, item, stop) for item in batch]\n'
             '            # as_completed hands results back in finishing order, not input order.\n'
             '            for future in as_completed(futures):\n'
             '                results.append(future.result())\n'),
        new=('        futures = [pool.submit(read_sync, item, stop) for item in product_ids]\n'
             '        for future in as_completed(futures):\n'
             '            results.append(future.result())\n'),
        fails=("05.3",),
        why="Submitting every id at once: max_workers still caps the running reads, but the pending "
            "futures grow with the input.",
    ),
    Mutant(
        name="05-four-workers",
        file="batch_io.py",
        old="ThreadPoolExecutor(max_workers=2)",
        new="ThreadPoolExecutor(max_workers=4)",
        fails=("05.3",),
        why="Four workers run a whole batch at once: twice the load the external service was sized for.",
    ),
    # ---- 05.4: to_thread + asyncio.timeout sets stop, the thread really exits
    Mutant(
        name="05-to-thread-without-stop",
        file="async_thread.py",
        old="        stop.set()  # without this the thread would read on for the full 2 s\n",
        new="",
        fails=("05.4",),
        why="Pitfall: the await is cancelled but nobody tells the thread; read_sync runs its full 2 s "
            "after the caller already reported a timeout.",
    ),
    Mutant(
        name="05-blocking-call-in-coroutine",
        file="async_thread.py",
        old="return await asyncio.to_thread(read_sync, 1, stop)",
        new="return read_sync(1, stop)",
        fails=("05.4",),
        why="Calling the blocking function directly blocks the event loop: the 0.2 s timeout cannot fire "
            "and demo() returns the full result after 2 s; the diagnosis names the blocking call and its hint is "
            "about to_thread, not stop.set().",
        says=(("05.4", "a blocking call in the event loop: read_sync (its time.sleep) ran on the loop's own thread"),),
        hints=(("05.4", "Inside async def, a blocking call"),),
    ),
    # ---- 05.5: exercise, a queued future can be cancelled
    Mutant(
        name="05-two-workers-nothing-queued",
        file="pool_io.py",
        old="with ThreadPoolExecutor(max_workers=1) as pool:",
        new="with ThreadPoolExecutor(max_workers=2) as pool:",
        fails=("05.5",),
        why="With two workers the second job starts at once, so there is no queued future to cancel "
            "and its cancel() is False too.",
    ),
    Mutant(
        name="05-read-cancelled-future",
        file="pool_io.py",
        old='            print("worker result:", future.result(timeout=1))\n',
        new=('            print("worker result:", future.result(timeout=1))\n'
             '            print("queued result:", queued.result(timeout=1))\n'),
        fails=("05.2", "05.5"),
        why="A cancelled future has no result: reading it raises CancelledError, which also ends the "
            "script before pool closed.",
    ),
]
