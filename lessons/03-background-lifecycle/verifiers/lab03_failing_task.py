"""Kit helper for lesson 03's check 03.3 (not a lesson file): `python lab03_failing_task.py`.

A fresh interpreter, so the learner's `running` set and the loop start clean.  A coroutine that raises
ValueError("drill-03") goes through task_registry.start; this program never awaits the task and never
reads its exception -- only the learner's done callback may.  Its report (lab03_demo.report): whether
start() put the task into `running`, the tasks left in it afterwards, the log records.
"""

import asyncio
import gc

from lab03_demo import keep_logs, report

keep = keep_logs()
import task_registry  # noqa: E402 - after the handlers, so nothing it logs is missed


async def boom(raised: asyncio.Event):
    await asyncio.sleep(0.05)
    raised.set()
    raise ValueError("drill-03")


async def main() -> tuple[bool, int]:
    raised = asyncio.Event()
    task = task_registry.start(boom(raised))
    registered = task in task_registry.running  # the strong reference, held while the task runs
    await raised.wait()
    for _ in range(20):  # loop turns, not time: the task ends on the next turn, its callbacks on the one after
        await asyncio.sleep(0)
    left = len(task_registry.running)
    del task  # our last reference: an unread exception is reported now ...
    gc.collect()
    return registered, left


registered, left = asyncio.run(main())
gc.collect()  # ... or at the latest here
report(keep, 200, registered=registered, left=left)
