"""The downstream port: "POST these bytes to this URL", and three ways to do it.

FakeDownstream      scripted answers, for tests and the demo; no network
HttpxDownstream     httpx2.AsyncClient: cancelling the awaiting task really stops the request
                    (the connection is closed, the server never gets to answer)
ThreadDownstream    a blocking httpx2.Client in a thread: cancelling only stops *waiting*;
                    the thread runs the request to its end and the result is thrown away

Transport failures come out as the two built-in families retry.py knows about:
DownstreamTimeout (a TimeoutError) and DownstreamUnavailable (a ConnectionError).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import httpx2

from .log import log


@dataclass(frozen=True)
class DownResponse:
    status: int
    body: bytes


class DownstreamTimeout(TimeoutError):
    """No answer within the call timeout."""


class DownstreamUnavailable(ConnectionError):
    """Could not connect, or the connection broke mid-way."""


class Downstream(Protocol):
    async def post(self, url: str, body: bytes, *, timeout: float,
                   idempotency_key: str | None = None) -> DownResponse: ...


def _headers(idempotency_key: str | None) -> dict[str, str]:
    # Retries and crash recovery can repeat a call: pass the key on so the downstream can dedupe.
    headers = {"content-type": "application/json"}
    if idempotency_key:
        headers["idempotency-key"] = idempotency_key
    return headers


def _translate(exc: httpx2.HTTPError) -> Exception:
    if isinstance(exc, httpx2.TimeoutException):
        return DownstreamTimeout(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, (httpx2.NetworkError, httpx2.RemoteProtocolError)):
        return DownstreamUnavailable(f"{type(exc).__name__}: {exc}")
    return exc  # e.g. an unsupported URL scheme: retrying will not fix it


class FakeDownstream:
    """Answers from a script, one item per call; an exception item is raised.
    When the script runs out, `default` answers (or the call fails loudly)."""

    def __init__(self, script: list[DownResponse | BaseException] | None = None, *,
                 default: DownResponse | None = None, delay_s: float = 0.0) -> None:
        self.script = list(script or [])
        self.default = default
        self.delay_s = delay_s
        self.calls = 0

    async def post(self, url: str, body: bytes, *, timeout: float,
                   idempotency_key: str | None = None) -> DownResponse:
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)  # an await point, so cancellation can land here
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item
        if self.default is None:
            raise RuntimeError("FakeDownstream: script exhausted")
        return self.default


class HttpxDownstream:
    """Real HTTP with httpx2.AsyncClient.  Cancellation reaches the socket: the awaiting task gets
    CancelledError at its current await, httpx2 drops the half-used connection, the server sees EOF."""

    def __init__(self, *, max_connections: int = 100) -> None:
        self._client = httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    async def post(self, url: str, body: bytes, *, timeout: float,
                   idempotency_key: str | None = None) -> DownResponse:
        try:
            response = await self._client.post(url, content=body, headers=_headers(idempotency_key),
                                               timeout=timeout)
        except httpx2.HTTPError as exc:
            raise _translate(exc) from exc
        return DownResponse(response.status_code, response.content)

    async def aclose(self) -> None:
        await self._client.aclose()


class ThreadDownstream:
    """A blocking client (think: a vendor SDK) run in a bounded thread pool.

    Python cannot stop a thread.  Cancelling the task that awaits this call only stops the
    waiting: the request runs to its end in the thread and its answer is discarded.  The
    `discarded` counter and the `thread_result_discarded` log line make that visible."""

    def __init__(self, *, max_threads: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="downstream")
        self._local = threading.local()  # httpx2.Client is not shared between threads
        self._clients: list[httpx2.Client] = []
        self._clients_lock = threading.Lock()
        self.discarded = 0

    def _client(self) -> httpx2.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx2.Client(follow_redirects=False)
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _post_blocking(self, url: str, body: bytes, timeout: float, idempotency_key: str | None) -> DownResponse:
        try:
            response = self._client().post(url, content=body, headers=_headers(idempotency_key), timeout=timeout)
        except httpx2.HTTPError as exc:
            raise _translate(exc) from exc
        return DownResponse(response.status_code, response.content)

    async def post(self, url: str, body: bytes, *, timeout: float,
                   idempotency_key: str | None = None) -> DownResponse:
        future = self._pool.submit(self._post_blocking, url, body, timeout, idempotency_key)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # future.cancel() fails for a call that already started; all we can do is
            # note when the thread really finishes and drop what it returns.
            future.add_done_callback(lambda f: self._discard(url, f))
            raise

    def _discard(self, url: str, future) -> None:
        with self._clients_lock:  # runs in the pool thread that finished the call
            self.discarded += 1
        outcome = "cancelled before start" if future.cancelled() else (
            f"error {future.exception()!r}" if future.exception() else f"http_status {future.result().status}")
        log("thread_result_discarded", url=url, reason="awaiting task was cancelled", outcome=outcome)

    async def aclose(self) -> None:
        # Wait for running calls in a thread of its own, so the event loop stays free.
        await asyncio.to_thread(self._pool.shutdown, wait=True)
        with self._clients_lock:
            for client in self._clients:
                client.close()
            self._clients.clear()
