"""Runs in a probe next to the learner's taskcenter/ package (shared/probe.py): lesson 07's task-center steps,
which the judge (lab07_verify_taskcenter.py) asks one at a time.  Plain data out; the judge decides.

A session is one Store on one file, known to the judge by its number, with an event loop of its own in a
thread: the worker keeps running between the judge's calls, so the judge can wait for a fact, cancel, and
look again.  Every wait here is bounded (BOUND).  A number this process does not know (the probe was
started afresh after a call ran out) is a no-op for the calls that clean up.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

from shared.learner_spies import start_call
from shared.logs import LOG_DIR

BOUND = 30.0  # backstop for waits that facts end in well under a second
_stream = None
_sessions: dict[int, Session] = {}
_numbers = itertools.count(1)


def load() -> None:
    """Import the package (a broken module fails the check that asked); task logs go to a file."""
    global _stream
    import taskcenter.log

    if _stream is None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        _stream = open(LOG_DIR / "inprocess.log", "a", encoding="utf-8")
        taskcenter.log.set_stream(_stream)  # the probe's output stays readable


def view(task) -> dict:
    state = task.state
    return {"id": task.id, "state": getattr(state, "value", state), "attempt": task.attempt,
            "error": task.error, "result": task.result}


# ---------------------------------------------------------------- the state machine and the retry policy

def transit(src: str, dst: str) -> dict:
    """{"illegal": True} when transit(src, dst) raised IllegalTransition, else the state it returned."""
    load()
    from taskcenter.models import IllegalTransition, State, transit as move
    try:
        got = move(State(src), State(dst))
    except IllegalTransition:
        return {"illegal": True}
    return {"illegal": False, "value": got.value if isinstance(got, State) else repr(got)}


def ways_out(src: str) -> list[str]:
    load()
    from taskcenter.models import ALLOWED, State
    return sorted(getattr(s, "value", repr(s)) for s in ALLOWED[State(src)])


def backoff(base_s: float, cap_s: float, attempts: int, sample_attempt: int, samples: int) -> dict:
    """Backoff(base_s, cap_s).delay: its lowest and highest value per attempt, free samples of one attempt,
    and attempt 1 at the middle of the jitter."""
    load()
    from taskcenter.retry import Backoff
    policy = Backoff(base_s=base_s, cap_s=cap_s)
    bounds = [(policy.delay(n, rand=lambda: 0.0), policy.delay(n, rand=lambda: 1.0 - 1e-12))
              for n in range(1, attempts + 1)]
    return {"bounds": bounds, "samples": [policy.delay(sample_attempt) for _ in range(samples)],
            "middle": policy.delay(1, rand=lambda: 0.5)}


# ---------------------------------------------------------------- sessions: a store, a loop, a worker

class Counting:
    """Counts calls in flight on the worker's side of the port."""

    def __init__(self, inner):
        self.inner, self.now, self.peak = inner, 0, 0

    async def post(self, *args, **kwargs):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self.inner.post(*args, **kwargs)
        finally:
            self.now -= 1

    async def aclose(self):
        await self.inner.aclose()


class Session:
    def __init__(self, store):
        self.store = store
        self.cancel_after_claim: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.down = self.worker = self.runner = self.capture = None
        self.records: list = []

    def on_loop(self, coro, timeout: float = BOUND):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, name="taskcenter-loop", daemon=True)
            self.thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def run(self):
        self.runner = asyncio.create_task(self.worker.run_forever())


def open_store(db: str, cancel_after_claim: bool = False) -> int:
    """Store.open(db); with cancel_after_claim, a Store whose claim_one cancels the tasks the judge names
    (see cancel_after_claim()) right after claiming them: a cancel that lands between claim and call."""
    load()
    from taskcenter.models import State
    from taskcenter.store import Store, connect

    if not cancel_after_claim:
        session = Session(Store.open(db))
    else:
        targets: set[str] = set()

        class CancelRightAfterClaim(Store):
            def claim_one(self, *args, **kwargs):
                task = super().claim_one(*args, **kwargs)
                if task is not None and task.id in targets:
                    self.mark(task.id, State.CANCELED, error="canceled by the verifier after claim")
                return task

        session = Session(CancelRightAfterClaim(connect(db)))
        session.cancel_after_claim = targets
    number = next(_numbers)
    _sessions[number] = session
    return number


def cancel_after_claim(handle: int, tid: str) -> None:
    _sessions[handle].cancel_after_claim.add(tid)


def submit(handle: int, url: str, body: bytes, key: str, max_attempts: int) -> dict:
    return view(_sessions[handle].store.submit(url, body, key, max_attempts))


def submit_many(handle: int, specs: list) -> list[str]:
    store = _sessions[handle].store
    return [store.submit(url, body, key, max_attempts).id for url, body, key, max_attempts in specs]


def submit_together(handles: list, url: str, body: bytes, key: str, max_attempts: int) -> list:
    """Each store submits the same key, released together by a barrier: the ids they got (None for a submit
    that raised or did not finish within BOUND)."""
    stores = [_sessions[h].store for h in handles]
    barrier = threading.Barrier(len(stores))

    def one(store):
        barrier.wait(BOUND)
        return store.submit(url, body, key, max_attempts).id

    calls = [start_call(one, store) for store in stores]  # what one raised is an observation: no id
    for thread, _ in calls:
        thread.join(BOUND)
    return [box.get("value") for _, box in calls]


def try_submit(handle: int, url: str, body: bytes, key: str, max_attempts: int) -> dict:
    """{"refused": message} when submit raised IdempotencyConflict, else {"task": the task it returned}."""
    from taskcenter.store import IdempotencyConflict
    try:
        task = _sessions[handle].store.submit(url, body, key, max_attempts)
    except IdempotencyConflict as exc:
        return {"refused": str(exc)}
    return {"task": view(task)}


def try_mark(handle: int, tid: str, state: str) -> bool:
    """True when store.mark(tid, state) raised IllegalTransition."""
    from taskcenter.models import IllegalTransition, State
    try:
        _sessions[handle].store.mark(tid, State(state))
    except IllegalTransition:
        return True
    return False


def capture_start(handle: int) -> None:
    from taskcenter.log import capture
    session = _sessions[handle]
    session.capture = capture()
    session.records = session.capture.__enter__()


def capture_take(handle: int) -> list:
    """The records logged since capture_start (the capture ends)."""
    session = _sessions.get(handle)
    if session is None or session.capture is None:
        return []
    session.capture.__exit__(None, None, None)
    session.capture = None
    return list(session.records)


def start_worker(handle: int, downstream: str = "httpx", run: bool = True, counting: bool = False,
                 max_threads: int = 2, **options) -> None:
    """A Worker on the session's loop, fast by configuration (options override), over HttpxDownstream
    ("httpx") or ThreadDownstream ("thread"); run: start run_forever now (else run_worker does)."""
    load()
    from taskcenter.downstream import HttpxDownstream, ThreadDownstream
    from taskcenter.retry import Backoff
    from taskcenter.worker import Worker
    session = _sessions[handle]
    settings = dict(concurrency=8, poll_interval=0.01, call_timeout=BOUND,
                    backoff=Backoff(base_s=0.01, cap_s=0.05), stop_grace_s=0.3)
    settings.update(options)

    async def build():
        down = HttpxDownstream() if downstream == "httpx" else ThreadDownstream(max_threads=max_threads)
        session.down = Counting(down) if counting else down
        session.worker = Worker(session.store, session.down, **settings)
        if run:
            await session.run()

    session.on_loop(build())


def run_worker(handle: int) -> None:
    _sessions[handle].on_loop(_sessions[handle].run())


def cancel(handle: int, tid: str) -> dict:
    """worker.cancel(tid): the task it returned and how long it took."""
    session = _sessions[handle]

    async def go():
        started = time.monotonic()
        got = await session.worker.cancel(tid)
        return view(got), time.monotonic() - started

    task, seconds = session.on_loop(go(), BOUND + 10)
    return {"task": task, "seconds": seconds}


def wait_discarded(handle: int, at_least: int, bound: float = BOUND) -> int:
    """The ThreadDownstream's discarded counter, once it reaches at_least (or at the bound)."""
    session = _sessions[handle]
    deadline = time.monotonic() + bound
    while session.down.discarded < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return session.down.discarded


def stop_worker(handle: int, close_down: bool = True) -> dict:
    """Stop the worker (grace 0.3 s, bounded), end its loop task; close the downstream unless asked not to.
    What the worker's side counted: {"peak": ...} with a counting downstream."""
    session = _sessions.get(handle)
    if session is None or session.worker is None:
        return {}

    async def go():
        try:
            await asyncio.wait_for(session.worker.stop(grace_s=0.3), BOUND)
        finally:
            runner = session.runner
            if runner is not None:
                if not runner.done():
                    runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)

    try:
        session.on_loop(go(), BOUND + 10)
    finally:
        session.worker = session.runner = None
        peak = getattr(session.down, "peak", None)
        if close_down:
            close_downstream(handle)
    return {"peak": peak}


def close_downstream(handle: int) -> None:
    session = _sessions.get(handle)
    if session is None or session.down is None:
        return
    down, session.down = session.down, None
    session.on_loop(down.aclose(), BOUND + 10)


def close_store(handle: int) -> None:
    """Stop whatever still runs in the session, close the store, end its loop."""
    session = _sessions.get(handle)
    if session is None:
        return
    try:
        stop_worker(handle)
        close_downstream(handle)
        capture_take(handle)
    finally:
        _sessions.pop(handle, None)
        try:
            session.store.close()
        finally:
            if session.loop is not None:
                session.loop.call_soon_threadsafe(session.loop.stop)
                session.thread.join(BOUND)


def open_api(db: str) -> int:
    """create_app(db, FakeDownstream answering 200), served by shared.asgi_probe (its lifespan runs)."""
    load()
    from taskcenter.api import create_app
    from taskcenter.downstream import DownResponse, FakeDownstream

    from shared.asgi_probe import serve
    return serve(create_app(db, FakeDownstream(default=DownResponse(200, b'{"ok": true}')), poll_interval=0.01))
