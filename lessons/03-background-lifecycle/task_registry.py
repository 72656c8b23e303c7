"""Lesson 03: give every asyncio.create_task an owner.

create_task schedules a coroutine and hands back a Task — and nothing else.
Somebody still has to (1) keep a strong reference, or the Task may be
garbage-collected mid-flight, (2) read its exception, or asyncio later prints
"Task exception was never retrieved", and (3) decide at shutdown whether to
wait for it or cancel it.  This module does (1) and (2); registry_demo.py
shows (3).  Importing it starts nothing.
"""

import asyncio
import logging
from collections.abc import Coroutine

# Strong references to the tasks that have not finished yet.
running: set[asyncio.Task] = set()


def observe(task: asyncio.Task) -> None:
    """Done callback: forget the task, and make sure a failure is seen by someone."""
    running.discard(task)  # first, so the set empties whatever the outcome
    if task.cancelled():
        return  # we asked for it; nothing to report (and task.exception() would raise)
    error = task.exception()  # reading it marks the failure as handled
    if error is not None:
        # Log, never raise: an exception escaping a callback only lands in the loop's handler.
        logging.error("background task %s failed: %r", task.get_name(), error, exc_info=error)


def start(coro: Coroutine) -> asyncio.Task:
    """Schedule coro on the running loop and register it; must be called from async code."""
    task = asyncio.create_task(coro)
    running.add(task)
    task.add_done_callback(observe)
    return task
