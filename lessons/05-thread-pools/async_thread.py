"""Lesson 05: asyncio.to_thread keeps the event loop free, but a timeout does not stop the thread.

Run it with   python async_thread.py
It prints "stop requested, thread exits cooperatively" after about 0.2 s and
exits once read_sync has noticed the stop event.

Cancelling the await only stops *waiting*; the thread keeps running until the
function returns.  So the timeout branch sets the event read_sync checks.
"""

import asyncio
from threading import Event

from pool_io import read_sync


async def demo():
    stop = Event()
    try:
        async with asyncio.timeout(0.2):
            return await asyncio.to_thread(read_sync, 1, stop)
    except TimeoutError:
        stop.set()  # without this the thread would read on for the full 2 s
        print("stop requested, thread exits cooperatively")


if __name__ == "__main__":
    # asyncio.run also waits for the default executor's threads before it returns.
    asyncio.run(demo())
