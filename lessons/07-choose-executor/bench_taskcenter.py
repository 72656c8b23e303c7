"""Benchmark: what the task center buys on the request path, and how many tasks/s it moves.

    python bench_taskcenter.py            about 50 s
    python bench_taskcenter.py --quick    a smaller run, about 25 s

Part 1, submit latency.  Both servers run on real uvicorn; the load comes from a separate
client process: a fixed number of requests at a fixed rate (open loop), at most 64 connections,
after a few uncounted warm-up requests:
    (a) POST /export on a FastAPI handler that calls a slow downstream (0.5-2 s) before answering
    (b) POST /tasks on the task center, whose worker calls the same slow downstream afterwards
then (b) once more at twice the rate, for context.
Part 2, throughput: tasks/s through the store and the worker with an instant downstream, at
concurrency 1, 8 and 64 (in a separate process, logs discarded).

Targets: at the same offered load, (b)'s P99 at most 1/50 of (a)'s; at least 500 tasks/s at
concurrency 64.
Network traffic only goes to 127.0.0.1 servers this script starts; it stops them itself.
Results: a table on stdout and bench_taskcenter.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP = 8  # requests per load run that are sent first and not counted
TARGET_RATIO = 50
TARGET_TPS = 500
PRESETS = {
    # Part 1 offers the same load to both servers (`rate` requests/s, at most `clients` connections),
    # then the task center alone at `busy_rate`, about what its 64 slots drain with 0.5-2 s calls
    # (64 / 1.25 s = 51 tasks/s).  Part 2: tasks per concurrency level.
    "full": {"rate": 24, "slow_requests": 240, "tc_requests": 240, "busy_rate": 48, "busy_requests": 720,
             "clients": 64, "tasks": {1: 1500, 8: 3000, 64: 4000}},
    "quick": {"rate": 24, "slow_requests": 72, "tc_requests": 120, "busy_rate": 48, "busy_requests": 240,
              "clients": 64, "tasks": {1: 500, 8: 1000, 64: 1500}},
}


# ---------------------------------------------------------------- the servers (each its own process)

def run_slow_downstream(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/work")
    async def work():
        await asyncio.sleep(random.uniform(0.5, 2.0))  # a slow partner API
        return {"ok": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def run_sync_api(port: int, downstream: str) -> None:
    import httpx2
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()
    client = httpx2.Client(timeout=10, limits=httpx2.Limits(max_connections=64))

    @app.post("/export")
    def export(payload: dict):
        # The pattern the task center replaces: the caller waits for the partner API
        # (a plain def runs in FastAPI's thread pool, so a blocking client is fine here).
        reply = client.post(downstream, json=payload)
        return {"status": reply.status_code}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------- the load client (its own process)

async def _load(url: str, kind: str, requests: int, clients: int, rate: float, downstream: str) -> dict:
    """Send `requests` requests at `rate` per second (open loop: request i is due at i/rate),
    through at most `clients` connections.  Latency counts from the due time, so a request
    that had to wait for a free connection is not flattered (no coordinated omission)."""
    import httpx2

    latencies: list[float] = []
    errors: list[str] = []
    want = 202 if kind == "taskcenter" else 200
    gate = asyncio.Semaphore(clients)

    async def one(client, n: int, due: float):
        if kind == "taskcenter":
            body = {"url": downstream, "payload": {"n": n}, "idempotency_key": f"bench-{uuid.uuid4().hex}"}
        else:
            body = {"n": n}
        async with gate:
            try:
                reply = await client.post(url, json=body)
                if reply.status_code != want:
                    errors.append(f"{reply.status_code} {reply.text[:100]}")
                    return
            except httpx2.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                return
        latencies.append((time.perf_counter() - due) * 1000)

    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx2.AsyncClient(timeout=15, limits=limits) as client:
        # Warm up (connections, first-call imports and caches), then drop what the warm-up measured.
        await asyncio.gather(*(one(client, -1 - i, time.perf_counter()) for i in range(WARMUP)))
        latencies.clear()
        errors.clear()
        started = time.perf_counter()
        jobs = []
        for n in range(requests):
            due = started + n / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            jobs.append(asyncio.create_task(one(client, n, due)))
        await asyncio.wait_for(asyncio.gather(*jobs), timeout=120)
        wall = time.perf_counter() - started
    return {"latencies_ms": latencies, "errors": errors[:5], "error_count": len(errors), "wall_s": wall,
            "rate": rate}


def run_load(args) -> None:
    result = asyncio.run(_load(args.url, args.kind, args.requests, args.clients, args.rate, args.downstream))
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------- throughput (its own process)

async def _throughput(concurrency: int, tasks: int, db: Path) -> dict:
    from taskcenter.downstream import DownResponse, FakeDownstream
    from taskcenter.models import State
    from taskcenter.store import Store
    from taskcenter.worker import Worker

    store = Store.open(db)
    for i in range(tasks):
        store.submit("http://127.0.0.1:9/instant", b"{}", f"tp-{i}", 3)
    worker = Worker(store, FakeDownstream(default=DownResponse(200, b"ok")), concurrency=concurrency,
                    poll_interval=0.005)
    started = time.perf_counter()
    loop = asyncio.create_task(worker.run_forever())
    deadline = started + 120
    while await asyncio.to_thread(store.count, State.SUCCESS) < tasks:
        if time.perf_counter() > deadline:
            raise TimeoutError("throughput run did not finish within 120 s")
        await asyncio.sleep(0.01)
    seconds = time.perf_counter() - started
    await worker.stop()
    await loop
    store.close()
    return {"concurrency": concurrency, "tasks": tasks, "seconds": round(seconds, 3),
            "tasks_per_s": round(tasks / seconds, 1)}


def run_throughput(args) -> None:
    from taskcenter import log

    log.set_stream(open(os.devnull, "w"))  # one JSON line per event would measure the terminal
    result = asyncio.run(_throughput(args.concurrency, args.tasks, Path(args.db)))
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------- orchestration

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Proc:
    """A child process in its own session, stopped by its pid (group) only."""

    def __init__(self, argv: list[str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(argv, cwd=HERE, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_port(self, port: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.popen.args[:4]} exited early:\n{self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"port {port} not open after {timeout} s")

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        self._log.close()


def _me(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _summary(name: str, run: dict) -> dict:
    lat = run["latencies_ms"]
    if not lat:
        raise RuntimeError(f"{name}: no successful request; errors: {run['errors']}")
    return {"variant": name, "rate_per_s": run["rate"], "requests": len(lat) + run["error_count"], "ok": len(lat),
            "errors": run["error_count"], "p50_ms": round(_percentile(lat, 50), 2),
            "p99_ms": round(_percentile(lat, 99), 2), "max_ms": round(max(lat), 2),
            "wall_s": round(run["wall_s"], 2), "error_samples": run["errors"]}


def _client(tmp: Path, name: str, url: str, kind: str, requests: int, clients: int, rate: float,
            downstream: str) -> dict:
    result = tmp / f"{name}.json"
    done = subprocess.run(_me("--role", "load", "--url", url, "--kind", kind, "--requests", str(requests),
                              "--clients", str(clients), "--rate", str(rate), "--downstream", downstream,
                              "--result", str(result)),
                          cwd=HERE, timeout=240, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"load client failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return json.loads(result.read_text())


def orchestrate(args) -> int:
    preset = PRESETS["quick" if args.quick else "full"]
    started = time.monotonic()
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="bench-taskcenter-") as tmpdir:
        tmp = Path(tmpdir)
        try:
            slow_port, sync_port, tc_port = _free_port(), _free_port(), _free_port()
            slow = Proc(_me("--role", "slow-downstream", "--port", str(slow_port)), tmp / "slow.log")
            procs.append(slow)
            slow.wait_port(slow_port)
            downstream = f"http://127.0.0.1:{slow_port}/work"
            sync_api = Proc(_me("--role", "sync-api", "--port", str(sync_port), "--downstream", downstream),
                            tmp / "sync.log")
            procs.append(sync_api)
            center = Proc([sys.executable, "-m", "taskcenter.main", "serve", "--db", str(tmp / "bench.db"),
                           "--port", str(tc_port), "--concurrency", "64", "--stop-grace", "0.5"], tmp / "tc.log")
            procs.append(center)
            sync_api.wait_port(sync_port)
            center.wait_port(tc_port)

            rate, clients = preset["rate"], preset["clients"]
            runs = []
            for label, port, kind, count, at in (
                    ("(a) handler calls the slow downstream", sync_port, "sync", preset["slow_requests"], rate),
                    ("(b) task center POST /tasks", tc_port, "taskcenter", preset["tc_requests"], rate),
                    ("(b) task center POST /tasks, busier", tc_port, "taskcenter", preset["busy_requests"],
                     preset["busy_rate"])):
                path = "/export" if kind == "sync" else "/tasks"
                print(f"{label}: {count} requests at {at}/s ...", flush=True)
                run = _client(tmp, kind + str(len(runs)), f"http://127.0.0.1:{port}{path}", kind, count, clients,
                              at, downstream)
                runs.append(_summary(label, run))
        finally:
            for proc in reversed(procs):
                proc.stop()

        throughput = []
        for concurrency, tasks in preset["tasks"].items():
            print(f"throughput at concurrency {concurrency}: {tasks} tasks ...", flush=True)
            result = tmp / f"tp{concurrency}.json"
            subprocess.run(_me("--role", "throughput", "--concurrency", str(concurrency), "--tasks", str(tasks),
                               "--db", str(tmp / f"tp{concurrency}.db"), "--result", str(result)),
                           cwd=HERE, timeout=180, check=True)
            throughput.append(json.loads(result.read_text()))

    slow_run, tc_runs = runs[0], runs[1:]
    ratios = [slow_run["p99_ms"] / run["p99_ms"] for run in tc_runs]
    top = next(r for r in throughput if r["concurrency"] == 64)["tasks_per_s"]
    # The target compares the side-by-side pair (same load, same client); the busier run is shown for context.
    targets = {
        "p99_ratio": {"value": round(ratios[0], 1), "busier_run": round(ratios[1], 1),
                      "target": f">= {TARGET_RATIO} at the same offered load", "met": ratios[0] >= TARGET_RATIO},
        "tasks_per_s_at_64": {"value": top, "target": f">= {TARGET_TPS}", "met": top >= TARGET_TPS},
    }
    report = {
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "submit_latency": {"max_connections": preset["clients"], "downstream_delay_s": [0.5, 2.0],
                           "latency_from": "the request's due time in an open-loop schedule", "runs": runs},
        "throughput": {"downstream": "instant (in-process fake)", "runs": throughput},
        "targets": targets,
        "seconds": round(time.monotonic() - started, 1),
    }
    Path(args.out).write_text(json.dumps(report, indent=2))

    print()
    print(f"Submit latency: open-loop load from a separate process (<= {preset['clients']} connections), "
          "real uvicorn, downstream 0.5-2 s")
    print(f"  {'variant':40} {'req/s':>6} {'ok':>6} {'err':>4} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for run in runs:
        print(f"  {run['variant']:40} {run['rate_per_s']:>6g} {run['ok']:>6} {run['errors']:>4} "
              f"{run['p50_ms']:>9.1f} {run['p99_ms']:>9.1f} {run['max_ms']:>9.1f}")
    print(f"  P99 (a)/(b) at {rate}/s = {ratios[0]:.0f}x   target >= {TARGET_RATIO}x: "
          f"{'met' if targets['p99_ratio']['met'] else 'MISSED'}   (busier run: {ratios[1]:.0f}x)")
    print()
    print("Throughput, instant downstream (store + worker, logs discarded)")
    print(f"  {'concurrency':>11} {'tasks':>7} {'seconds':>8} {'tasks/s':>9}")
    for run in throughput:
        print(f"  {run['concurrency']:>11} {run['tasks']:>7} {run['seconds']:>8.2f} {run['tasks_per_s']:>9.0f}")
    print(f"  at 64: {top:.0f} tasks/s   target >= {TARGET_TPS}: "
          f"{'met' if targets['tasks_per_s_at_64']['met'] else 'MISSED'}")
    print(f"\nwritten to {args.out} ({report['seconds']} s in all)")
    return 0 if all(t["met"] for t in targets.values()) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests and tasks")
    parser.add_argument("--out", default="bench_taskcenter.json")
    parser.add_argument("--role", default="bench",
                        choices=("bench", "slow-downstream", "sync-api", "load", "throughput"),
                        help=argparse.SUPPRESS)
    for name in ("--port", "--requests", "--clients", "--concurrency", "--tasks"):
        parser.add_argument(name, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    for name in ("--url", "--kind", "--downstream", "--result", "--db"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "slow-downstream":
        run_slow_downstream(args.port)
    elif args.role == "sync-api":
        run_sync_api(args.port, args.downstream)
    elif args.role == "load":
        run_load(args)
    elif args.role == "throughput":
        run_throughput(args)
    else:
        sys.exit(orchestrate(args))


if __name__ == "__main__":
    main()
