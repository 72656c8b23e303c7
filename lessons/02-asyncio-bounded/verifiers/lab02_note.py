"""Kit runner for lesson 02's extension checks 02.6–02.10 (not a lesson file):  python lab02_note.py SCRIPT

Runs SCRIPT as `python SCRIPT` would and reports (shared/probe_report.py) what asyncio really did in it, each
event numbered in the order it happened (one process, one counter: the order is a fact, not a clock): every task
(its cancel() calls, how and when it ended); every printed line (which task printed it, and whether that task was
being cancelled then); every budget -- asyncio.wait_for and asyncio.timeout: its delay, how it ended, which task
ran it, which tasks were unfinished then; every asyncio.shield (the task it protects); every asyncio.TaskGroup
(its tasks, what its `async with` raised).  A script that only prints the expected lines leaves none of these.
"""

from __future__ import annotations

import asyncio
import itertools
import sys

from shared import probe_report
from shared.learner_spies import Lines, run_as_main

_seq = itertools.count(1)
tasks: dict[int, RecTask] = {}
record: dict = {"lines": [], "budgets": [], "shields": [], "groups": [], "outcome": "ok"}


class RecTask(asyncio.Task):
    """A task that notes its cancel() calls and when it ended."""

    def __init__(self, coro, *, loop=None, name=None, context=None):
        super().__init__(coro, loop=loop, name=name, context=context)
        self.lab_id = len(tasks) + 1
        tasks[self.lab_id] = self
        self.lab = {"id": self.lab_id, "created": next(_seq), "cancel_calls": []}
        self.add_done_callback(lambda _: self.lab.setdefault("ended", next(_seq)))

    def cancel(self, msg=None):
        self.lab["cancel_calls"].append(next(_seq))
        return super().cancel(msg)


def _factory(loop, coro, context=None):
    return RecTask(coro, loop=loop, context=context)


class _Policy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self):
        loop = super().new_event_loop()
        loop.set_task_factory(_factory)
        return loop


def _current() -> RecTask | None:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: printed outside asyncio
        return None
    return task if isinstance(task, RecTask) else None


def _unfinished() -> list[int]:
    return [n for n, task in tasks.items() if not task.done()]


_real_wait_for = asyncio.wait_for


async def _wait_for(fut, timeout, **kwargs):
    me = _current()
    entry = {"kind": "wait_for", "delay": timeout, "start": next(_seq), "task": me and me.lab_id,
             "awaits": fut.lab_id if isinstance(fut, RecTask) else None}
    record["budgets"].append(entry)
    try:
        value = await _real_wait_for(fut, timeout, **kwargs)
    except BaseException as exc:
        entry.update(end=next(_seq), outcome=type(exc).__name__, unfinished=_unfinished())
        raise
    entry.update(end=next(_seq), outcome="returned", value=str(value)[:80], unfinished=_unfinished())
    return value


_real_timeout = asyncio.timeout


class _Timeout:
    """asyncio.timeout(delay), noting how its block ended."""

    def __init__(self, delay):
        self.inner = _real_timeout(delay)
        self.entry = {"kind": "timeout", "delay": delay}
        record["budgets"].append(self.entry)

    async def __aenter__(self):
        me = _current()
        self.entry.update(start=next(_seq), task=me and me.lab_id)
        return await self.inner.__aenter__()

    async def __aexit__(self, exc_type, exc, tb):
        try:
            result = await self.inner.__aexit__(exc_type, exc, tb)
        except BaseException as raised:
            self.entry.update(end=next(_seq), outcome=type(raised).__name__, unfinished=_unfinished())
            raise
        outcome = "returned" if exc_type is None else exc_type.__name__
        self.entry.update(end=next(_seq), outcome=outcome, unfinished=_unfinished())
        return result


_real_shield = asyncio.shield


def _shield(arg):
    known = len(tasks)
    outer = _real_shield(arg)
    inner = arg if isinstance(arg, RecTask) else (tasks[len(tasks)] if len(tasks) > known else None)
    record["shields"].append({"at": next(_seq), "inner": inner.lab_id if inner is not None else None})
    return outer


class _TaskGroup(asyncio.TaskGroup):
    """asyncio.TaskGroup, noting its tasks and what its `async with` raised."""

    def __init__(self):
        super().__init__()
        self.lab = {"start": next(_seq), "tasks": []}
        record["groups"].append(self.lab)

    def create_task(self, coro, *, name=None, context=None):
        task = super().create_task(coro, name=name, context=context)
        self.lab["tasks"].append(getattr(task, "lab_id", None))
        return task

    async def __aexit__(self, exc_type, exc, tb):
        try:
            result = await super().__aexit__(exc_type, exc, tb)
        except BaseException as raised:
            inner = [f"{type(e).__name__}: {e}" for e in getattr(raised, "exceptions", ())]
            self.lab.update(end=next(_seq), raised=type(raised).__name__, inner=inner)
            raise
        self.lab.update(end=next(_seq), raised=None, inner=[])
        return result


def _line(text: str) -> None:
    """Note each printed line with the task that printed it."""
    task = _current()
    record["lines"].append({"at": next(_seq), "text": text.strip(), "task": task and task.lab_id,
                            "cancelling": task.cancelling() if task is not None else 0})


def _ending(task: RecTask) -> dict:
    info = dict(task.lab)
    if not task.done():
        info["state"] = "pending"
    elif task.cancelled():
        info["state"] = "cancelled"
    elif task.exception() is not None:
        info.update(state="raised", error=type(task.exception()).__name__)
    else:
        info.update(state="returned", value=str(task.result())[:80])
    return info


def main(script: str) -> int:
    asyncio.set_event_loop_policy(_Policy())
    asyncio.wait_for, asyncio.timeout, asyncio.shield, asyncio.TaskGroup = _wait_for, _Timeout, _shield, _TaskGroup
    sys.stdout = Lines(sys.stdout, _line)
    record["outcome"] = run_as_main(script)
    sys.stdout.flush()
    record["tasks"] = [_ending(task) for task in tasks.values()]
    probe_report.write(record, default=None)  # a value JSON cannot carry fails here: the judge finds no record
    return 0 if record["outcome"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
