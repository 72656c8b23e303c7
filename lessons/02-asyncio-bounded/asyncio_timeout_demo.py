"""Quote with a 100 ms budget: give up, cancel the upstream call, answer a degraded quote.

Run:  python asyncio_timeout_demo.py
Expected:
    quote cancelled; cleanup
    timeout
    result: quote:degraded
"""

from __future__ import annotations

import asyncio

UPSTREAM_SECONDS = 0.5  # how long the slow quote service takes
BUDGET_SECONDS = 0.1  # how long the trading page is willing to wait


async def slow_quote() -> str:
    try:
        await asyncio.sleep(UPSTREAM_SECONDS)  # stands in for the network round trip
        return "quote:100"
    except asyncio.CancelledError:
        # Cancellation arrives at the await above.  Release what the call held
        # (connection, pool slot), then let the cancellation continue.
        print("quote cancelled; cleanup")
        raise


async def fetch_with_budget() -> str:
    task = asyncio.create_task(slow_quote(), name="quote")
    try:
        # On expiry wait_for cancels the task AND waits for its cleanup, so the
        # task is finished when TimeoutError reaches us (cleanup time counts too).
        return await asyncio.wait_for(task, timeout=BUDGET_SECONDS)
    except TimeoutError:
        print("timeout")
        return "quote:degraded"


async def main() -> None:
    print("result:", await fetch_with_budget())


if __name__ == "__main__":
    asyncio.run(main())
