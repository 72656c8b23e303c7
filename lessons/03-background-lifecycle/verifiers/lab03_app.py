"""Kit wrapper for lesson 03's checks (not a lesson file): the learner's app, with its export's wait held.

uvicorn runs `lab03_app:app`: api_background's own app, with two additions that observe and hold:

  - every HTTP request runs with a note of whether its response has been sent in full (an ASGI wrapper
    around `send`; Starlette runs BackgroundTasks only after that);
  - api_background's `asyncio.sleep` -- the export's stand-in for work -- first writes down whether it
    runs before or after its request's response.  After the response it waits for the checker's word
    (shared.handshake: it says it is ready, then waits for go) instead of sleeping.  Before the response
    (the work awaited inside the handler) it is not held, so a wrong folder cannot deadlock its own request.

So the checker looks at the job while its work is provably under way, instead of hoping that a poll lands
inside a one-second window.  LAB03_GATE names the folder of the handshake files.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from pathlib import Path

import api_background
from shared import handshake

GATE = Path(os.environ["LAB03_GATE"])
_response: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lab03_response", default=None)
_count = {"sleeps": 0}


class _HeldAsyncio:
    """What api_background sees as `asyncio`: the real module, except for sleep."""

    def __getattr__(self, name):
        return getattr(asyncio, name)

    async def sleep(self, delay, result=None):
        _count["sleeps"] += 1
        name = f"sleep-{_count['sleeps']}"
        request = _response.get()
        after = bool(request and request["sent"])
        handshake.write_json(GATE / f"seen-{name}", {"after_response": after, "path": request and request["path"]})
        if not after:
            return await asyncio.sleep(delay, result)
        handshake.ready(GATE, name)
        # The blocking poll runs in a thread: the event loop goes on answering requests meanwhile.
        await asyncio.to_thread(handshake.wait_go, GATE, name)
        return result


api_background.asyncio = _HeldAsyncio()


async def app(scope, receive, send):
    if scope["type"] != "http":
        return await api_background.app(scope, receive, send)
    request = {"sent": False, "path": f"{scope.get('method')} {scope.get('path')}"}
    token = _response.set(request)

    async def watched(message):
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            request["sent"] = True

    try:
        await api_background.app(scope, receive, watched)
    finally:
        _response.reset(token)
