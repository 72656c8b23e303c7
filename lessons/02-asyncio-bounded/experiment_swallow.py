"""Experiment 3 (counter-example, do not copy): slow_quote swallows its cancellation.

Run:  python experiment_swallow.py
Expected: result: nope   -- no "timeout" line, no degraded quote.
wait_for asked the task to cancel, but the task returned a value instead of
ending cancelled, so wait_for hands that value back.  A cancel request is only
a request; the task decides.  Real code cleans up and re-raises.
"""

from __future__ import annotations

import asyncio

UPSTREAM_SECONDS = 0.5
BUDGET_SECONDS = 0.1


async def slow_quote() -> str:
    try:
        await asyncio.sleep(UPSTREAM_SECONDS)
        return "quote:100"
    except asyncio.CancelledError:
        print("quote cancelled; swallowing it")
        return "nope"  # the mistake: no raise, so the cancellation is lost


async def fetch_with_budget() -> str:
    task = asyncio.create_task(slow_quote(), name="quote")
    try:
        return await asyncio.wait_for(task, timeout=BUDGET_SECONDS)
    except TimeoutError:
        print("timeout")
        return "quote:degraded"


async def main() -> None:
    print("result:", await fetch_with_budget())


if __name__ == "__main__":
    asyncio.run(main())
