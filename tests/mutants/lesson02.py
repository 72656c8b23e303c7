"""Lesson 02 mutants: plausible mistakes in bounded_async.py and the asyncio note's scripts (the extension)."""

from tests.mutants import Mutant

_READ_LINES = ("                    async with slots:  # hold a slot only around the read itself\n"
               "                        results[product_id] = await read_product(product_id)\n")

MUTANTS = [
    # ---- 02.1 normal batch / four consumers
    Mutant(
        name="five-consumers",
        file="bounded_async.py",
        old="CONSUMERS = 4\n",
        new="CONSUMERS = 5\n",
        fails=("02.1",),
        why="the lesson fixes the number of consumer tasks at four",
    ),
    Mutant(
        name="closed-printed-twice",
        file="bounded_async.py",
        old=("                    if product_id is None:  # sentinel: no more work for this consumer\n"
             "                        return\n"),
        new=("                    if product_id is None:  # sentinel: no more work for this consumer\n"
             "                        print(\"consumer closed\")\n"
             "                        return\n"),
        fails=("02.1",),
        why="cleanup reported on the sentinel and again in finally: each consumer must clean up once",
    ),
    Mutant(
        name="one-sentinel-short",
        file="bounded_async.py",
        old="        for _ in range(CONSUMERS):\n            await queue.put(None)  # one sentinel per consumer\n",
        new="        for _ in range(CONSUMERS - 1):\n            await queue.put(None)  # one sentinel per consumer\n",
        fails=("02.1", "02.2", "02.5"),
        why="one consumer never gets its None: it waits in get() forever and the TaskGroup never exits "
            "(the stall is seen on the event loop: nothing to run, no timer pending)",
    ),
    # ---- 02.2 limits
    Mutant(
        name="blocking-sleep-in-read",
        file="bounded_async.py",
        old="        await asyncio.sleep(0.1)  # the network wait; other tasks run meanwhile\n",
        new="        __import__(\"time\").sleep(0.1)  # a blocking wait: nothing else runs meanwhile\n",
        fails=("02.2",),
        why="time.sleep in a coroutine blocks the event loop: the reads run one at a time, and the check says "
            "'blocking call in async code' with the place of the call",
    ),
    Mutant(
        name="unbounded-queue",
        file="bounded_async.py",
        old="asyncio.Queue(maxsize=QUEUE_SIZE)",
        new="asyncio.Queue()",
        fails=("02.2",),
        why="an unbounded queue lets the producer pile every id into memory",
    ),
    Mutant(
        name="serial-reads",
        file="bounded_async.py",
        old="READ_SLOTS = 2\n",
        new="READ_SLOTS = 1\n",
        fails=("02.2",),
        why="one slot makes the batch serial: the two permits are the point",
    ),
    Mutant(
        name="three-slots",
        file="bounded_async.py",
        old="READ_SLOTS = 2\n",
        new="READ_SLOTS = 3\n",
        fails=("02.2", "02.5"),
        why="three permits let three reads hit the product API at once (the exercise's peak sees it too)",
    ),
    # ---- 02.3 timeout
    Mutant(
        name="partial-result-after-timeout",
        file="bounded_async.py",
        old=("        print(\"batch timed out\")\n"
             "        return\n"),
        new=("        print(\"batch timed out\")\n"
             "        rows = {}\n"),
        fails=("02.3",),
        why="falling through after the timeout reports completed 0 as if the batch had finished",
    ),
    Mutant(
        name="consumer-swallows-cancel",
        file="bounded_async.py",
        old=_READ_LINES,
        new=("                    async with slots:  # hold a slot only around the read itself\n"
             "                        try:\n"
             "                            results[product_id] = await read_product(product_id)\n"
             "                        except asyncio.CancelledError:\n"
             "                            continue  # keep going: the batch never stops\n"),
        fails=("02.3", "02.4", "02.5"),
        why="a consumer that swallows CancelledError keeps running after the deadline and the batch hangs",
    ),
    Mutant(
        name="cleanup-only-on-sentinel",
        file="bounded_async.py",
        old=("    async def consume() -> None:\n"
             "        try:\n"
             "            while True:\n"
             "                product_id = await queue.get()\n"
             "                try:\n"
             "                    if product_id is None:  # sentinel: no more work for this consumer\n"
             "                        return\n"
             "                    async with slots:  # hold a slot only around the read itself\n"
             "                        results[product_id] = await read_product(product_id)\n"
             "                finally:\n"
             "                    # Settle the item even when the read failed or was cancelled,\n"
             "                    # otherwise queue.join() would wait for it forever.\n"
             "                    queue.task_done()\n"
             "        finally:\n"
             "            print(\"consumer closed\")\n"),
        new=("    async def consume() -> None:\n"
             "        while True:\n"
             "            product_id = await queue.get()\n"
             "            try:\n"
             "                if product_id is None:\n"
             "                    print(\"consumer closed\")  # only the happy path gets here\n"
             "                    return\n"
             "                async with slots:\n"
             "                    results[product_id] = await read_product(product_id)\n"
             "            finally:\n"
             "                queue.task_done()\n"),
        fails=("02.3", "02.4"),
        why="cleanup written on the sentinel path is skipped when a consumer is cancelled",
    ),
    # ---- 02.4 one failing item
    Mutant(
        name="consumer-swallows-errors",
        file="bounded_async.py",
        old=_READ_LINES,
        new=("                    async with slots:  # hold a slot only around the read itself\n"
             "                        try:\n"
             "                            results[product_id] = await read_product(product_id)\n"
             "                        except Exception as exc:\n"
             "                            print(\"skipped\", product_id, exc)\n"),
        fails=("02.4",),
        why="except Exception in the consumer hides the failure and the batch reports completed 19",
    ),
    # ---- 02.5 exercise
    Mutant(
        name="in-flight-not-in-finally",
        file="bounded_async.py",
        old=("    try:\n"
             "        await asyncio.sleep(0.1)  # the network wait; other tasks run meanwhile\n"
             "    finally:\n"
             "        # finally: a cancelled or failed read must still give its count back.\n"
             "        in_flight -= 1\n"),
        new=("    await asyncio.sleep(0.1)  # the network wait; other tasks run meanwhile\n"
             "    in_flight -= 1\n"),
        fails=("02.5",),
        why="a read cancelled by the timeout never gives its count back",
    ),
    Mutant(
        name="peak-never-updated",
        file="bounded_async.py",
        old="    peak = max(peak, in_flight)\n",
        new="",
        fails=("02.5",),
        why="a peak that is never updated says 0 while two reads overlap",
    ),
    # ---- 02.6 demo
    Mutant(
        name="demo-cancel-not-reraised",
        file="asyncio_timeout_demo.py",
        old="        print(\"quote cancelled; cleanup\")\n        raise\n",
        new="        print(\"quote cancelled; cleanup\")\n",
        fails=("02.6",),
        why="without raise the cancel is swallowed and wait_for returns None instead of timing out",
    ),
    Mutant(
        name="demo-prints-the-lines",
        file="asyncio_timeout_demo.py",
        old='    print("result:", await fetch_with_budget())\n',
        new=('    print("quote cancelled; cleanup")\n'
             '    print("timeout")\n'
             '    print("result: quote:degraded")\n'),
        fails=("02.6",),
        why="a script that prints the three expected lines without any budget expiring or task being cancelled",
    ),
    # ---- 02.7 relaxed budget
    Mutant(
        name="relaxed-budget-too-short",
        file="experiment_relaxed.py",
        old="BUDGET_SECONDS = 1.0",
        new="BUDGET_SECONDS = 0.4",
        fails=("02.7",),
        why="0.4 s is still shorter than the 0.5 s upstream",
    ),
    Mutant(
        name="relaxed-prints-the-line",
        file="experiment_relaxed.py",
        old='    print("result:", await fetch_with_budget())\n',
        new='    print("result: quote:100")\n',
        fails=("02.7",),
        why="printing the expected line without any budget: the experiment is about wait_for returning in time",
    ),
    # ---- 02.8 swallow counter-example
    Mutant(
        name="swallow-experiment-reraises",
        file="experiment_swallow.py",
        old='        return "nope"  # the mistake: no raise, so the cancellation is lost\n',
        new="        raise\n",
        fails=("02.8",),
        why="re-raising is the correct code, so the counter-example no longer shows the swallowed value",
    ),
    # ---- 02.9 TaskGroup
    Mutant(
        name="gather-instead-of-taskgroup",
        file="experiment_taskgroup.py",
        old=("        async with asyncio.TaskGroup() as group:\n"
             "            sibling = group.create_task(call_upstream(\"inventory\", 0.5))\n"
             "            group.create_task(failing_upstream(\"pricing\", 0.1))\n"),
        new=("        sibling = asyncio.create_task(call_upstream(\"inventory\", 0.5))\n"
             "        await asyncio.gather(sibling, failing_upstream(\"pricing\", 0.1))\n"),
        fails=("02.9",),
        why="gather passes the first error on without cancelling the sibling",
    ),
    # ---- 02.10 shield
    Mutant(
        name="shield-removed",
        file="experiment_shield.py",
        old="asyncio.wait_for(asyncio.shield(task), timeout=0.1)",
        new="asyncio.wait_for(task, timeout=0.1)",
        fails=("02.10",),
        why="without shield wait_for cancels the task itself, so nothing outlives the timeout",
    ),
]
