"""Kit wrapper for lesson 03's checks (not a lesson file): the learner's app, with its export's wait held.

uvicorn runs `lab03_app:app`: api_background's own app, except that
  - each HTTP request notes when its response has been sent in full (Starlette runs BackgroundTasks after);
  - api_background's `asyncio.sleep` (the export's stand-in for work) writes down whether it runs before or
    after its request's response.  After it, it waits for the checker's word (shared.handshake, in the folder
    LAB03_GATE) instead of sleeping; before it (work awaited inside the handler) it is not held, so a wrong
    folder cannot deadlock its own request.
  - a blocked event loop is written down: `blocking-N`, time.sleep called on the loop's own thread (its
    place); `noyield-ID`, a job went from running to its next state without the loop ever running a callback
    scheduled when it became running (its work never gave the loop back).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import sys
import time
from pathlib import Path

from shared import handshake

GATE = Path(os.environ["LAB03_GATE"])
_real_sleep = time.sleep
_blocks = itertools.count(1)


def _watched_sleep(seconds):
    if asyncio._get_running_loop() is not None:  # a blocking sleep on the loop's thread: nothing else runs
        frame = sys._getframe(1)
        handshake.write_json(GATE / f"blocking-{next(_blocks)}", {
            "place": f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}",
            "function": frame.f_code.co_name, "seconds": seconds})
    _real_sleep(seconds)


time.sleep = _watched_sleep  # before api_background is imported, so `from time import sleep` gets it too

import api_background  # noqa: E402
_response: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lab03_response", default=None)
_sleeps = itertools.count(1)


class _HeldAsyncio:
    """What api_background sees as `asyncio`: the real module, except for sleep."""

    def __getattr__(self, name):
        return getattr(asyncio, name)

    async def sleep(self, delay, result=None):
        name = f"sleep-{next(_sleeps)}"
        request = _response.get()
        after = bool(request and request["sent"])
        handshake.write_json(GATE / f"seen-{name}", {"name": name, "after_response": after,
                                                      "path": request and request["path"]})
        if not after:
            return await asyncio.sleep(delay, result)
        handshake.ready(GATE, name)
        # The blocking poll runs in a thread: the event loop goes on answering requests meanwhile.
        await asyncio.to_thread(handshake.wait_go, GATE, name)
        return result


api_background.asyncio = _HeldAsyncio()

_real_transition = api_background.transition
_turned: dict[str, list] = {}  # job id -> [True] once the loop ran anything after the job became running


def _transition(job_id, target):
    _real_transition(job_id, target)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if target == "running":
        _turned[job_id] = []
        loop.call_soon(_turned[job_id].append, True)
    elif job_id in _turned and not _turned.pop(job_id):
        handshake.write_json(GATE / f"noyield-{job_id}", {"job": job_id, "target": target})


api_background.transition = _transition


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
