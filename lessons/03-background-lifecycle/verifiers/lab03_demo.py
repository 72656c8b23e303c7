"""Kit runner for lesson 03's checks 03.2 and 03.5 (not a lesson file): `python lab03_demo.py registry_demo.py`.

Runs the learner's registry_demo.py as `python registry_demo.py` would (runpy, as __main__), with
task_registry.start -- the name the course gives -- wrapped so that each task it starts is seen:

  - whether start() put it into task_registry.running (the strong reference the course asks for);
  - how its coroutine ended: returned, cancelled, or the exception it raised (the coroutine is wrapped,
    the task and its exception stay the learner's; nothing here reads the task's exception).

Error records of the learner's loggers and asyncio's own reports ("Task exception was never retrieved",
"Exception in callback") are kept apart.  At the end it prints the demo's output as usual, then one
`RESULT {json}` line: the tasks, the log records, asyncio's reports, what is left in `running`.
"""

import gc
import json
import logging
import runpy
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
root.addHandler(logging.StreamHandler(sys.stderr))  # the learner still sees their log lines
root.setLevel(logging.INFO)

import task_registry  # noqa: E402 - after the handlers, so nothing it logs is missed

started = []  # one record per task started through task_registry.start
real_start = task_registry.start


def start(coro):
    record = {"ended": "running"}
    started.append(record)

    async def observed():
        try:
            value = await coro
        except BaseException as exc:
            record["ended"] = type(exc).__name__
            record["error"], record["message"] = repr(exc)[:160], str(exc)[:160]
            raise
        record["ended"] = "returned"
        return value

    task = real_start(observed())
    record["registered"] = task in task_registry.running
    return task


task_registry.start = start


def text(record) -> str:
    extra = record.exc_info[1] if record.exc_info and record.exc_info[1] else None
    return record.getMessage() + (f" [{extra!r}]" if extra is not None else "")


outcome = "ok"
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
except SystemExit as exc:
    if exc.code not in (None, 0):
        outcome = f"SystemExit: {exc.code}"
except BaseException as exc:  # the learner's script crashed: say how, keep the facts gathered so far
    outcome = f"{type(exc).__name__}: {exc}"
gc.collect()  # a task nobody read is reported when it is collected
sys.stdout.flush()
print("RESULT " + json.dumps({
    "outcome": outcome,
    "started": started,
    "left": len(task_registry.running),
    "logged": [text(r) for r in keep.records if r.name != "asyncio" and r.levelno >= logging.ERROR],
    "loop": [r.getMessage()[:300] for r in keep.records if r.name == "asyncio"],
}), flush=True)
