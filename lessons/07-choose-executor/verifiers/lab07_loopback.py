"""Kit helper for lesson 07's task-center checks (not a lesson file): a loopback downstream we can watch, an
http.server in a thread of the checker's process on a free 127.0.0.1 port (see Loopback).  Held requests end by
facts (the checker's release, the client hanging up, a barrier that opens once n requests are inside at the
same time); at the cap the connection's state decides, never the clock alone.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOLD_CAP = 20.0  # a held request answers by itself after this long, whatever happens


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the TAP output clean
        pass

    def do_POST(self) -> None:
        lab: Loopback = self.server.lab
        name = self.path.split("?")[0].strip("/")
        self.rfile.read(int(self.headers.get("content-length") or 0))
        action, call = lab._enter(name, self.headers.get("idempotency-key"))
        try:
            if action == "hold" and not lab._hold(self.connection, name):
                lab._outcome(name, "client_closed")
                return
            if action == "gather":
                lab._gather(name)
            elif isinstance(action, float):  # seconds of "work"
                time.sleep(action)
            status = 200 if action in ("hold", "gather") or isinstance(action, float) else int(action)
            body = json.dumps({"name": name, "call": call}).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                lab._outcome(name, f"answered {status}")
            except OSError:
                lab._outcome(name, "write_failed")
        finally:
            lab._leave(name)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many connections arrive at once when a limit is broken


class Loopback:
    """Answers POST /NAME from a per-name script: a status, "hold" (until the client closes the
    connection or release(NAME)), "gather" (wait at NAME's barrier until gather(NAME, n)'s n requests
    are all inside, then 200), or a float (sleep that long, then 200).  Default: 200.
    Counts calls, concurrent requests and how each one ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.plans: dict[str, list] = {}
        self.calls: Counter = Counter()
        self.active: Counter = Counter()
        self.peak: Counter = Counter()
        self.outcomes: dict[str, list[str]] = defaultdict(list)
        self.keys: dict[str, list] = defaultdict(list)
        self.releases: dict[str, threading.Event] = defaultdict(threading.Event)
        self.barriers: dict[str, threading.Barrier] = {}
        self.gathered: Counter = Counter()  # requests that passed their barrier
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.lab = self
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="loopback-downstream", daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def script(self, name: str, plan: list) -> str:
        with self.lock:
            self.plans[name] = list(plan)
        return self.url(name)

    def release(self, name: str) -> None:
        self.releases[name].set()

    def gather(self, name: str, n: int) -> None:
        """NAME's "gather" requests wait until n of them are inside the server at once."""
        self.barriers[name] = threading.Barrier(n, timeout=HOLD_CAP)

    def _gather(self, name: str) -> None:
        try:
            self.barriers[name].wait()
        except threading.BrokenBarrierError:
            return  # never n at once (or a later one after a failure): answer, the check says so
        with self.lock:
            self.gathered[name] += 1

    def snapshot(self, name: str) -> dict:
        with self.lock:
            return {"calls": self.calls[name], "active": self.active[name], "peak": self.peak[name],
                    "outcomes": list(self.outcomes[name])}

    def _enter(self, name: str, key) -> tuple[object, int]:
        with self.lock:
            plan = self.plans.get(name) or []
            action = plan.pop(0) if plan else 200
            self.calls[name] += 1
            self.active[name] += 1
            self.peak[name] = max(self.peak[name], self.active[name])
            self.keys[name].append(key)
            return action, self.calls[name]

    def _leave(self, name: str) -> None:
        with self.lock:
            self.active[name] -= 1

    def _outcome(self, name: str, what: str) -> None:
        with self.lock:
            self.outcomes[name].append(what)

    def _hold(self, conn: socket.socket, name: str) -> bool:
        """Wait until released (True) or until the client hangs up (False).  When the wait ends, the
        connection decides: a client that hung up meanwhile is reported as such, whatever the clock."""
        deadline = time.monotonic() + HOLD_CAP
        release = self.releases[name]
        while not release.is_set() and time.monotonic() < deadline:
            if self._hung_up(conn, 0.02):
                return False
        return not self._hung_up(conn, 0)

    @staticmethod
    def _hung_up(conn: socket.socket, wait: float) -> bool:
        readable, _, _ = select.select([conn], [], [], wait)
        if not readable:
            return False
        try:
            if conn.recv(1, socket.MSG_PEEK) == b"":
                return True
        except OSError:
            return True
        time.sleep(0.02)  # more bytes from the client (not expected): do not spin on them
        return False

    def stop(self) -> None:
        for event in list(self.releases.values()):
            event.set()
        for barrier in list(self.barriers.values()):
            barrier.abort()
        self.httpd.shutdown()
        self.httpd.server_close()
