"""Experiment 2: the demo with a budget (1.0 s) longer than the upstream (0.5 s).

Run:  python experiment_relaxed.py
Expected: result: quote:100   -- and no "cancelled" or "timeout" line.
Only BUDGET_SECONDS differs from asyncio_timeout_demo.py.
"""

from __future__ import annotations

import asyncio

UPSTREAM_SECONDS = 0.5
BUDGET_SECONDS = 1.0  # the one change: enough time for the upstream to answer


async def slow_quote() -> str:
    try:
        await asyncio.sleep(UPSTREAM_SECONDS)
        return "quote:100"
    except asyncio.CancelledError:
        print("quote cancelled; cleanup")
        raise


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
