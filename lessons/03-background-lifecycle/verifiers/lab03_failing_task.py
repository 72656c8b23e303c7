"""Kit helper for lesson 03's check 03.3 (not a lesson file): `python lab03_failing_task.py`.

A fresh interpreter, so the learner's `running` set and the loop start clean.  A coroutine that raises
ValueError("drill-03") goes through task_registry.start; this program never awaits the task and never
reads its exception -- only the learner's done callback may.  It prints one RESULT line (JSON): whether
start() put the task into `running`, the tasks left in it afterwards, the errors logged (outside asyncio's
own logger) and what asyncio itself reported.
"""

import asyncio
import gc
import json
import logging
import sys


class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


keep = Keep()
root = logging.getLogger()
root.addHandler(keep)
root.addHandler(logging.StreamHandler(sys.stderr))
root.setLevel(logging.INFO)

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


def text(record) -> str:
    extra = record.exc_info[1] if record.exc_info and record.exc_info[1] else None
    return record.getMessage() + (f" [{extra!r}]" if extra is not None else "")


registered, left = asyncio.run(main())
gc.collect()  # ... or at the latest here
print("RESULT " + json.dumps({
    "registered": registered,
    "left": left,
    "logged": [text(r) for r in keep.records if r.name != "asyncio" and r.levelno >= logging.ERROR],
    "loop": [r.getMessage()[:200] for r in keep.records if r.name == "asyncio"],
}), flush=True)
