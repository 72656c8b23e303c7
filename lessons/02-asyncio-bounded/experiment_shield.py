"""Experiment 5: shield stops the timeout from cancelling the inner task -- so someone else must.

Run:  python experiment_shield.py
Expected, in this order:
    outer timeout
    inner done after timeout: False
    inner cancelled; cleanup
    inner cancelled: True
wait_for(shield(task), 0.1) only limits how long *we* wait.  The shielded task
keeps running after the timeout; its owner must cancel it and await it.
"""

from __future__ import annotations

import asyncio


async def slow_quote() -> str:
    try:
        await asyncio.sleep(5)  # far longer than the budget: only a cancel ends it early
        return "quote:100"
    except asyncio.CancelledError:
        print("inner cancelled; cleanup")
        raise


async def main() -> None:
    task = asyncio.create_task(slow_quote(), name="quote")
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=0.1)
    except TimeoutError:
        print("outer timeout")
    # The evidence: the timeout cancelled the shield, not the task behind it.
    print("inner done after timeout:", task.done())

    # We own the task, so we end it: request the cancel, then wait for the cleanup.
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    print("inner cancelled:", task.cancelled())


if __name__ == "__main__":
    asyncio.run(main())
