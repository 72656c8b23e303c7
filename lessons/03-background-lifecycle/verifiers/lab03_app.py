"""Kit wrapper for lesson 03's checks (not a lesson file): the learner's app, with its export's wait held.

uvicorn runs `lab03_app:app`: api_background's own app, except that
  - each HTTP request notes when its response has been sent in full (Starlette runs BackgroundTasks after);
  - api_background's `asyncio.sleep` (the export's stand-in for work) writes down whether it runs before or
    after its request's response.  After it, it waits for the checker's word (shared.handshake, in the folder
    TASKLAB_EXPORT_GATE) instead of sleeping; before it (work awaited inside the handler) it is not held, so a
    wrong folder cannot deadlock its own request.
  - a blocked event loop is written down: `blocking-N`, time.sleep called on the loop's own thread (its
    place); `noyield-ID`, a job went from running to its next state without the loop ever running a callback
    scheduled when it became running (its work never gave the loop back).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
from pathlib import Path

from shared import handshake
from shared.learner_spies import LoopTurn, ModuleView, watch_loop_sleeps

GATE = Path(os.environ["TASKLAB_EXPORT_GATE"])
_blocks = itertools.count(1)


def _blocking_sleep(place, function, seconds):
    handshake.write_json(GATE / f"blocking-{next(_blocks)}", {"place": place, "function": function,
                                                               "seconds": seconds})


watch_loop_sleeps(_blocking_sleep)  # before api_background is imported, so `from time import sleep` gets it too

import api_background  # noqa: E402
_response: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lab03_response", default=None)
_sleeps = itertools.count(1)


async def _held_sleep(delay, result=None):
    """api_background's asyncio.sleep: noted, and held after its request's response."""
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


api_background.asyncio = ModuleView(asyncio, sleep=_held_sleep)  # the real module, except for sleep

_real_transition = api_background.transition
_turned: dict[str, LoopTurn] = {}  # job id -> did the loop run anything after the job became running?


def _transition(job_id, target):
    _real_transition(job_id, target)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    if target == "running":
        _turned[job_id] = LoopTurn(loop)
    elif job_id in _turned and not _turned.pop(job_id).turned:
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
