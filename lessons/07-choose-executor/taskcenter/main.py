"""Run the task center.

    python -m taskcenter.main            the demo: a scripted downstream, no network, ends by itself
    python -m taskcenter.main serve ...  the HTTP API and its worker on uvicorn (see --help)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from .downstream import DownResponse, FakeDownstream, ThreadDownstream
from .models import Task
from .retry import Backoff
from .store import IdempotencyConflict, Store
from .worker import Worker

DEMO_URL = "http://downstream.invalid/work"  # never contacted: the demo's downstream is a script


async def _final(store: Store, tid: str, timeout: float = 10.0) -> Task:
    deadline = time.monotonic() + timeout
    while True:
        task = await store.call(store.get, tid)
        if task.terminal:
            return task
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {tid} still {task.state.value} after {timeout:g} s")
        await asyncio.sleep(0.02)


async def demo(db_path: Path) -> None:
    store = Store.open(db_path)
    # The first task meets a 503 then a 200; the second one a 400.
    down = FakeDownstream([DownResponse(503, b"busy"), DownResponse(200, b'{"ok": true}'),
                           DownResponse(400, b"bad request")])
    worker = Worker(store, down, concurrency=2, poll_interval=0.02, call_timeout=1.0,
                    backoff=Backoff(base_s=0.05, cap_s=0.5))
    loop = asyncio.create_task(worker.run_forever())
    try:
        body = json.dumps({"n": 1}).encode()
        first = await store.call(store.submit, DEMO_URL, body, "demo-1", 3)
        again = await store.call(store.submit, DEMO_URL, body, "demo-1", 3)
        print(f"demo: submitted {first.id}; the same key again gives the same id: {again.id == first.id}")
        worker.notify()
        done = await _final(store, first.id)
        print(f"demo: demo-1 ended {done.state.value} at attempt {done.attempt} with result {done.result!r}")
        calls_before = down.calls
        second = await store.call(store.submit, DEMO_URL, body, "demo-2", 3)
        worker.notify()
        done2 = await _final(store, second.id)
        print(f"demo: demo-2 ended {done2.state.value} ({done2.error}) after {down.calls - calls_before} call")
        try:
            await store.call(store.submit, DEMO_URL, body, "demo-1")
        except IdempotencyConflict as exc:
            print(f"demo: submitting demo-1 again is refused: {exc}")
    finally:
        await worker.stop()
        await loop
        store.close()


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from .api import create_app

    downstream = ThreadDownstream(max_threads=args.concurrency) if args.downstream == "thread" else None
    app = create_app(args.db, downstream, concurrency=args.concurrency, call_timeout=args.call_timeout,
                     stale_after_s=args.stale_after, backoff=Backoff(base_s=args.backoff_base, cap_s=args.backoff_cap),
                     poll_interval=args.poll_interval, stop_grace_s=args.stop_grace)
    # uvicorn turns SIGTERM/SIGINT into a lifespan shutdown, which stops the worker gracefully.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m taskcenter.main", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("serve", help="run the HTTP API and the worker on uvicorn")
    run.add_argument("--db", default="taskcenter.db", help="SQLite file (created if missing)")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8007)
    run.add_argument("--concurrency", type=int, default=8, help="downstream calls in flight at most")
    run.add_argument("--call-timeout", type=float, default=5.0, help="seconds per downstream call")
    run.add_argument("--stale-after", type=float, default=600.0,
                     help="at start, running tasks older than this many seconds go back to pending")
    run.add_argument("--backoff-base", type=float, default=0.2)
    run.add_argument("--backoff-cap", type=float, default=8.0)
    run.add_argument("--poll-interval", type=float, default=0.05)
    run.add_argument("--stop-grace", type=float, default=5.0, help="seconds running calls get at shutdown")
    run.add_argument("--downstream", choices=("httpx", "thread"), default="httpx",
                     help="httpx: httpx2.AsyncClient (cancel interrupts); thread: blocking client in threads")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args)
        return
    with tempfile.TemporaryDirectory(prefix="taskcenter-demo-") as tmp:
        asyncio.run(demo(Path(tmp) / "tasks.db"))


if __name__ == "__main__":
    main(sys.argv[1:])
