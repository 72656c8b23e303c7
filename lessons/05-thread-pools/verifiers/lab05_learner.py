"""Runs in a probe next to the learner's pool_io.py, batch_io.py and async_thread.py (shared/probe.py):
lesson 05's scenarios for 05.2 (read_sync on its own), 05.3 (export_batches) and 05.4 (demo()).

Each scenario loads a fresh copy of the learner's module, instruments it, runs it and answers with what
it saw, as plain data -- observations, never verdicts.  An exception the learner's code raised is kept
under a number; the judge asks for it (`reraise`) once its own earlier findings are said.  Every wait
here is bounded (CALL_BOUND, SHUTDOWN_BOUND); the judge's calls have timeouts beyond them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from shared.learner_spies import fresh_module, replace_sleep, start_call
from shared.proc import WaitTimeout, wait_until

CALL_BOUND = 30.0  # read_sync's whole loop takes 2 s; waits for it end after this, whatever it does
SHUTDOWN_BOUND = 10.0  # the default executor's shutdown, once read_sync has returned (or given up on)

_raised: dict[int, BaseException] = {}  # run number -> what the learner's code raised there
_to_thread: dict[int, dict] = {}  # 05.4's run number -> what its exit step needs
_numbers = itertools.count(1)


def keep(exc: BaseException) -> int:
    number = next(_numbers)
    _raised[number] = exc
    return number


def reraise(number: int) -> None:
    """Raise again what the learner's code raised in run `number` (the judge gets it rebuilt)."""
    raise _raised.pop(number)


def finished(thread: threading.Thread, box: dict, **seen) -> dict:
    """Wait up to CALL_BOUND for start_call's thread: returned (in time), value, seconds, and raised (a number
    for `reraise`), beside `seen`."""
    thread.join(CALL_BOUND)
    returned = not thread.is_alive()
    return dict(seen, returned=returned, value=box.get("value"), seconds=box.get("seconds"),
                raised=keep(box["error"]) if returned and "error" in box else None)


class Slices:
    """Counts the slices a read_sync waits through (time.sleep, or stop.wait with a timeout) and how
    many began after its stop event was set.  A read_sync that checks stop before every slice begins
    at most one after the set: the one that may start between its check and the set."""

    def __init__(self):
        self.cond = threading.Condition()
        self.begun = 0
        self.at_stop: int | None = None  # slices begun when stop was set

    def begin(self) -> None:
        with self.cond:
            self.begun += 1
            self.cond.notify_all()

    def after_stop(self) -> int:
        with self.cond:
            return 0 if self.at_stop is None else self.begun - self.at_stop

    def sleep(self, seconds) -> None:
        """The sleep put in the read's module (shared.learner_spies.replace_sleep): one slice."""
        self.begin()
        time.sleep(seconds)


class SpyStop(threading.Event):
    """The stop event handed to read_sync: notes when it is set, and counts a timed wait as a slice."""

    def __init__(self, slices: Slices):
        super().__init__()
        self.slices = slices

    def set(self) -> None:
        with self.slices.cond:
            if self.slices.at_stop is None:
                self.slices.at_stop = self.slices.begun
        super().set()

    def wait(self, timeout=None):
        if timeout is not None:
            self.slices.begin()
        return super().wait(timeout)


# ---------------------------------------------------------------- 05.2: read_sync on its own

def stop_read() -> dict:
    """read_sync(3, stop) in a thread; stop is set once its first slice has begun (or it has returned).
    began: slices begun at the set; after: slices begun after it."""
    pool_io = fresh_module("pool_io")
    slices = Slices()
    replace_sleep(pool_io, slices.sleep)
    stop = SpyStop(slices)
    thread, box = start_call(pool_io.read_sync, 3, stop)
    with slices.cond:
        slices.cond.wait_for(lambda: slices.begun or not thread.is_alive(), timeout=CALL_BOUND)
    began = slices.begun
    stop.set()
    return dict(finished(thread, box, began=began), after=slices.after_stop())


# ---------------------------------------------------------------- 05.3: export_batches

class BatchProbe:
    """Instrumented stand-ins for the ThreadPoolExecutor and read_sync that batch_io looks up."""

    def __init__(self, seconds: float = 0.15):
        self.seconds = seconds
        self.guard = threading.Lock()
        self.live: list = []
        self.submitted = self.max_outstanding = self.running = self.max_running = 0
        self.workers: list = []
        # For the figures only: each read's thread and time span, the futures outstanding at each change.
        self.reads: list = []
        self.outstanding: list = []
        probe = self

        class CountingPool(ThreadPoolExecutor):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                probe.workers.append(self._max_workers)

            def submit(self, fn, /, *args, **kwargs):
                future = super().submit(fn, *args, **kwargs)
                with probe.guard:
                    probe.submitted += 1
                    probe.live.append(future)
                    outstanding = sum(not f.done() for f in probe.live)
                    probe.max_outstanding = max(probe.max_outstanding, outstanding)
                    if len(probe.outstanding) < 1000:
                        probe.outstanding.append([time.monotonic(), outstanding])
                future.add_done_callback(probe.settled)
                return future

        self.pool_class = CountingPool

    def settled(self, _future) -> None:
        with self.guard:
            if len(self.outstanding) < 1000:
                self.outstanding.append([time.monotonic(), sum(not f.done() for f in self.live)])

    def read_sync(self, product_id, stop):
        read = [threading.current_thread().name, repr(product_id)[:20], None, None]
        with self.guard:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            read[2] = time.monotonic()
            if len(self.reads) < 400:
                self.reads.append(read)
        try:
            time.sleep(self.seconds)  # a short stand-in: the shape of the batching is what counts
        finally:
            with self.guard:
                read[3] = time.monotonic()
                self.running -= 1
        return {"id": product_id, "cancelled": False}

    def seen(self) -> dict:
        with self.guard:
            return {"submitted": self.submitted, "max_outstanding": self.max_outstanding,
                    "max_running": self.max_running, "workers": list(self.workers),
                    "reads": [list(read) for read in self.reads], "outstanding": [list(o) for o in self.outstanding]}


def batches() -> dict:
    """export_batches(range(8)) with batch_io's ThreadPoolExecutor and read_sync replaced by counting
    stand-ins (reads and outstanding: for the figures only)."""
    batch_io = fresh_module("batch_io")
    if not hasattr(batch_io, "export_batches"):
        return {"has": False}
    probe = BatchProbe()
    batch_io.ThreadPoolExecutor = probe.pool_class
    batch_io.read_sync = probe.read_sync
    seen = finished(*start_call(batch_io.export_batches, list(range(8))), has=True)
    seen["results"] = seen.pop("value")
    return dict(seen, **probe.seen())


# ---------------------------------------------------------------- 05.4: demo() under to_thread

def to_thread() -> dict:
    """async_thread.demo() on an event loop of its own (in this thread), read_sync traced and its slices
    counted, Event replaced by SpyStop.  Then read_sync is given CALL_BOUND to return by itself, before
    the default executor shuts down (SHUTDOWN_BOUND).  escaped: a TimeoutError left demo(); run: the number
    for `to_thread_exit`."""
    module = fresh_module("async_thread")
    if not hasattr(module, "demo"):
        return {"has": False}
    calls: list[dict] = []
    real_read = module.read_sync
    slices = Slices()
    loop_thread = threading.current_thread()

    def traced_read(product_id, stop):
        call = {"thread": threading.current_thread()}
        calls.append(call)
        try:
            return real_read(product_id, stop)
        finally:
            call["end"] = True

    class RecordingEvent(SpyStop):
        def __init__(self):
            super().__init__(slices)

    module.read_sync = traced_read
    module.Event = RecordingEvent
    # Count the slices where read_sync's own module looks up its sleep (pool_io, as a rule).
    home = sys.modules.get(getattr(real_read, "__module__", None) or "")
    undo = replace_sleep(home, slices.sleep) if home is not None else (lambda: None)

    baseline = threading.active_count()
    loop = asyncio.new_event_loop()
    # The loop's default executor (what to_thread uses), made here so that its shutdown can be bounded.
    executor = ThreadPoolExecutor(thread_name_prefix="asyncio")
    loop.set_default_executor(executor)
    printed = io.StringIO()
    seen = {"has": True, "escaped": False, "raised": None, "returned": None, "seconds": None}
    started = time.monotonic()
    try:
        with contextlib.redirect_stdout(printed):
            try:
                seen["returned"] = loop.run_until_complete(module.demo())
            except TimeoutError:
                seen["escaped"] = True
            except BaseException as exc:  # noqa: BLE001 - the judge asks for it once it has said the rest
                seen["raised"] = keep(exc)
        seen["seconds"] = time.monotonic() - started
        if not seen["escaped"] and seen["raised"] is None:
            # The thread must finish because the function returned, not because we shut the pool down:
            # wait for read_sync to return by itself (its whole loop takes 2 s) before the shutdown.
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: calls and "end" in calls[0], CALL_BOUND, "read_sync to return", interval=0.01)
    finally:
        start_call(executor.shutdown, name="executor-shutdown")[0].join(SHUTDOWN_BOUND)
        loop.close()
        undo()
    number = next(_numbers)
    _to_thread[number] = {"thread": calls[0]["thread"] if calls else None, "baseline": baseline}
    return dict(seen, run=number, lines=printed.getvalue().strip().splitlines(), calls=len(calls),
                on_loop_thread=bool(calls) and calls[0]["thread"] is loop_thread,
                ended=bool(calls) and "end" in calls[0], at_stop=slices.at_stop, after=slices.after_stop())


def to_thread_exit(number: int) -> dict:
    """Wait (CALL_BOUND) until the thread count is back to where 05.4's run started and the thread that ran
    read_sync has exited.  exited: both came true; threads, baseline: the counts now and then."""
    run = _to_thread.pop(number)
    thread, baseline = run["thread"], run["baseline"]
    exited = True
    try:
        wait_until(lambda: threading.active_count() <= baseline and not (thread is not None and thread.is_alive()),
                   CALL_BOUND, "the worker thread to exit")
    except WaitTimeout:
        exited = False
    return {"exited": exited, "threads": threading.active_count(), "baseline": baseline}
