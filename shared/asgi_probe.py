"""Runs inside a probe (shared/probe.py), next to learner code: the learner's ASGI app behind starlette's
TestClient.  Answers are plain data for the judge; nothing here decides anything."""

from __future__ import annotations

import importlib
import itertools

_clients: dict[int, object] = {}
_numbers = itertools.count(1)


def open(target: str) -> int:  # noqa: A001 - the probe calls it by this name
    """Import "module:attr" and serve that app (see serve)."""
    module, _, attr = target.partition(":")
    return serve(getattr(importlib.import_module(module), attr))


def serve(app) -> int:
    """Start the app behind a TestClient (its lifespan runs); a handle for request() and close()."""
    from fastapi.testclient import TestClient
    # raise_server_exceptions=False: a crash in a route shows up as a 500 the check can report.
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()
    number = next(_numbers)
    _clients[number] = client
    return number


def request(handle: int, method: str, url: str, **kwargs) -> dict:
    response = _clients[handle].request(method, url, **kwargs)
    return {"status": response.status_code, "headers": list(response.headers.multi_items()),
            "text": response.text, "url": str(response.request.url)}


def close(handle: int) -> None:
    client = _clients.pop(handle, None)
    if client is not None:
        client.__exit__(None, None, None)
