"""Experiment 4: two slow upstream calls in one TaskGroup; one fails, the other is cancelled.

Run:  python experiment_taskgroup.py
Expected, in this order:
    pricing failing
    inventory cancelled; cleanup
    caught ExceptionGroup: ValueError('pricing upstream refused')
    sibling cancelled: True
The TaskGroup cancels the sibling and waits for its cleanup before the
ExceptionGroup leaves the `async with` block.
"""

from __future__ import annotations

import asyncio


async def call_upstream(name: str, seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
        return f"{name}:ok"
    except asyncio.CancelledError:
        print(f"{name} cancelled; cleanup")
        raise


async def failing_upstream(name: str, seconds: float) -> str:
    await asyncio.sleep(seconds)
    print(f"{name} failing")
    raise ValueError(f"{name} upstream refused")


async def main() -> None:
    sibling = None
    try:
        async with asyncio.TaskGroup() as group:
            sibling = group.create_task(call_upstream("inventory", 0.5))
            group.create_task(failing_upstream("pricing", 0.1))
    except* ValueError as failed:
        # except* matches inside the ExceptionGroup the TaskGroup raised.
        print("caught ExceptionGroup:", ", ".join(repr(e) for e in failed.exceptions))
    print("sibling cancelled:", sibling.cancelled())


if __name__ == "__main__":
    asyncio.run(main())
