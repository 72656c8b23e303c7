"""Lesson 03: a shutdown in three moves — wait, cancel, await the cleanup.

Run it with   python registry_demo.py
After 0.1 s the done callback logs the exercise's ValueError; about 3 seconds later
it prints "cleanup" and "remaining 0".
"""

import asyncio

from task_registry import running, start

GRACE_SECONDS = 3  # how long unfinished work may still finish on its own


async def work() -> None:
    try:
        await asyncio.sleep(30)  # much longer than the grace window, so it will be cancelled
    finally:
        print("cleanup")  # runs on success, failure and cancellation alike


async def failing_work() -> None:
    """The exercise: work that fails after 0.1 s.  Nobody awaits it, so only the registry's done
    callback can see the ValueError: it logs it and takes the task out of `running`."""
    await asyncio.sleep(0.1)
    raise ValueError("drill")


async def main() -> None:
    start(work())
    start(failing_work())  # the exercise: its error is logged, not lost
    await asyncio.sleep(0.1)  # the application "runs" for a moment, then shuts down

    # 1. Give unfinished tasks a bounded window to finish by themselves.
    pending = set(running)
    if pending:
        _, pending = await asyncio.wait(pending, timeout=GRACE_SECONDS)
    # 2. Ask the rest to stop.  cancel() is only a request ...
    for task in pending:
        task.cancel()
    # 3. ... so wait until they have really left their finally blocks.
    await asyncio.gather(*pending, return_exceptions=True)
    print("remaining", len(running))


if __name__ == "__main__":
    asyncio.run(main())
