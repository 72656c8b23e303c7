"""The HTTP surface (FastAPI).  The request path only registers; the worker does the work.

    POST /tasks               202 + Location: /tasks/{id}   (409 if the key already finished)
    GET  /tasks/{id}          the stored task, 404 if unknown
    POST /tasks/{id}/cancel   200 canceled, 409 if it already finished, 404 if unknown
    GET  /healthz             200 while the worker loop is alive, else 503

The body is validated by a Pydantic model before the handler runs, so a bad request
gets 422 and leaves no row behind.  The task is committed to SQLite before the 202
goes out: once the caller holds an id, a crash cannot take the task away.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

from .downstream import Downstream, HttpxDownstream
from .log import log
from .models import State, Task
from .retry import Backoff
from .store import IdempotencyConflict, Store
from .worker import Worker

MAX_PAYLOAD_BYTES = 64 * 1024  # the task row is a message: keep it small


class TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored

    url: HttpUrl                                        # http(s) only, with a host
    payload: Any = Field(default_factory=dict)          # the JSON the worker will POST
    idempotency_key: str = Field(min_length=1, max_length=200)
    max_attempts: int = Field(default=3, ge=1, le=10)

    @field_validator("payload")
    @classmethod
    def _small(cls, value: Any) -> Any:
        if len(json.dumps(value).encode()) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes once encoded")
        return value


def task_view(task: Task) -> dict[str, Any]:
    total_ms = None if task.finished_at is None else int((task.finished_at - task.created_at) * 1000)
    return {
        "id": task.id,
        "state": task.state.value,
        "url": task.url,
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "error": task.error,
        "result": None if task.result is None else task.result.decode("utf-8", errors="replace"),
        "created_at": task.created_at,
        "finished_at": task.finished_at,
        "total_ms": total_ms,
    }


def _not_found(tid: str) -> JSONResponse:
    return JSONResponse(status_code=404, content={"detail": f"no task with id {tid!r}"})


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with one readable line per problem, e.g. "url: Input should be a valid URL"."""
    problems, detail = [], []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ()) if part != "body"]
        if err.get("type") == "json_invalid":
            message = "the body is not valid JSON"
        elif not loc:
            message = f"body: {err.get('msg')} (send a JSON object with Content-Type: application/json)"
        else:
            message = f"{'.'.join(loc) or 'body'}: {err.get('msg')}"
        problems.append(message)
        detail.append({"loc": loc, "msg": err.get("msg"), "type": err.get("type")})
    return JSONResponse(status_code=422, content={"error": "invalid request", "message": "; ".join(problems),
                                                  "detail": detail})


def create_app(db_path: str | Path, downstream: Downstream | None = None, *, concurrency: int = 8,
               poll_interval: float = 0.05, call_timeout: float = 5.0, stale_after_s: float = 600.0,
               backoff: Backoff = Backoff(), stop_grace_s: float = 5.0) -> FastAPI:
    """Build the app; the store, the worker and (unless given) an httpx2 downstream live in its lifespan."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        store = await asyncio.to_thread(Store.open, db_path)
        down = downstream if downstream is not None else HttpxDownstream(max_connections=max(concurrency, 10))
        worker = Worker(store, down, concurrency=concurrency, poll_interval=poll_interval,
                        call_timeout=call_timeout, stale_after_s=stale_after_s, backoff=backoff,
                        stop_grace_s=stop_grace_s)
        loop = asyncio.create_task(worker.run_forever(), name="taskcenter-worker")
        loop.add_done_callback(_report_loop_end)
        app.state.store, app.state.worker, app.state.loop = store, worker, loop
        log("taskcenter_started", db=str(db_path), concurrency=concurrency, stale_after_s=stale_after_s)
        try:
            yield
        finally:
            await worker.stop()
            if hasattr(down, "aclose"):  # the app owns its downstream, given or built
                await down.aclose()
            await asyncio.to_thread(store.close)
            log("taskcenter_stopped")

    app = FastAPI(title="taskcenter", lifespan=lifespan)
    app.add_exception_handler(RequestValidationError, _invalid_request)

    @app.post("/tasks", status_code=202)
    async def submit_task(spec: TaskIn, request: Request, response: Response):
        store: Store = request.app.state.store
        body = json.dumps(spec.payload).encode()
        url = str(spec.url)
        try:
            task = await store.call(store.submit, url, body, spec.idempotency_key, spec.max_attempts)
        except IdempotencyConflict as exc:
            return JSONResponse(status_code=409, headers={"Location": f"/tasks/{exc.task.id}"}, content={
                "detail": f"idempotency key already used by a task that finished as {exc.task.state.value}",
                "id": exc.task.id, "state": exc.task.state.value})
        if (task.url, task.body) != (url, body):
            # Same key, different request: a client bug; answering with the old task would hide it.
            return JSONResponse(status_code=409, content={
                "detail": "idempotency key already used for a different url or payload", "id": task.id})
        request.app.state.worker.notify()
        response.headers["Location"] = f"/tasks/{task.id}"
        return task_view(task)

    @app.get("/tasks/{tid}")
    async def get_task(tid: str, request: Request):
        try:
            store: Store = request.app.state.store
            task = await store.call(store.get, tid)
        except KeyError:
            return _not_found(tid)
        return task_view(task)

    @app.post("/tasks/{tid}/cancel")
    async def cancel_task(tid: str, request: Request):
        try:
            task = await request.app.state.worker.cancel(tid)
        except KeyError:
            return _not_found(tid)
        if task.state is not State.CANCELED:
            return JSONResponse(status_code=409, content={**task_view(task),
                                                          "detail": f"already finished as {task.state.value}"})
        return task_view(task)

    @app.get("/healthz")
    async def healthz(request: Request):
        alive = not request.app.state.loop.done()
        return JSONResponse(status_code=200 if alive else 503, content={"worker": "running" if alive else "stopped"})

    return app


def _report_loop_end(loop: asyncio.Task) -> None:
    if not loop.cancelled() and loop.exception() is not None:
        exc = loop.exception()
        log("worker_died", error=f"{type(exc).__name__}: {exc}")
