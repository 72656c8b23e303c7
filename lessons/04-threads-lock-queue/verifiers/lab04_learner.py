"""Runs in a probe next to the learner's threaded_queue.py (shared/probe.py): lesson 04's scenarios.

Each check loads a fresh copy of threaded_queue.py (counters at zero whatever an earlier check did) and
drives it step by step as the judge asks; each step answers with what it saw, as plain data --
observations, never verdicts.  Every wait here is bounded (BOUND); the judge's call has a timeout beyond it.
Instrumentation replaces module globals: `time` (counts the sleeps), `mutex` (knows its holder) and, for
the exercise, `pending` (a view of the learner's own queue counting the puts that found it full).  04.1's
contention run (contend) also replaces `counts`: a dict whose every read and write lets the other threads in
first, so an update made outside mutex is interleaved for sure, not only if CPython happens to switch
threads inside `counts["done"] += 1` (since 3.10 it switches at calls and backward jumps, so in practice never).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from queue import Queue

from lab04_stuck import deadlocked
from shared.learner_spies import fresh_module, replace_sleep, start_call
from shared.proc import WaitTimeout, wait_until

SCRIPT = "threaded_queue.py"
NAMES = ("pending", "mutex", "counts", "errors", "consume")
IDS = 20
WORKERS = 2
BOUND = 30.0  # backstop for waits that facts normally end in well under a second (the probe's, and 04.2's script)
MEET_BOUND = 15.0  # 04.3's barrier gives up after this (shorter than BOUND, so the producer outlasts it)
CONTEND_IDS, CONTEND_WORKERS = 200, 4  # 04.1's contention run: more ids and threads than the course's demo
SWITCH = 1e-6  # seconds: the thread switch interval during it (CPython's default is 5 ms)


def total(counts) -> int:
    return int(counts.get("done", 0)) + int(counts.get("failed", 0))


class TrackedLock:
    """Stands in for the module's mutex and remembers which thread holds it."""

    def __init__(self):
        self._lock = threading.Lock()
        self.owner = None

    def acquire(self, blocking=True, timeout=-1):
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.owner = threading.get_ident()
        return got

    def release(self):
        self.owner = None
        self._lock.release()

    def locked(self):
        return self._lock.locked()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


class SeenCounts(dict):
    """Stands in for the module's counts in the contention run.  Each read lets the other threads run before
    it returns its value, and each write before it writes (sleep(0)), so in `counts[key] += 1` another thread
    can always come between the read and the write: without mutex held both read the same value and one
    increment is lost -- the race of rule 1, made certain (also when only the read is under mutex).  Under
    mutex nobody else can come in, so nothing is lost.  Each write notes, per key, whether its thread held
    the (tracked) mutex: evidence for the judge's message."""

    def __init__(self, start: dict, lock: TrackedLock):
        super().__init__(start)
        self.blank = start.copy()  # answers a missing key as the learner's own kind would (Counter: 0)
        self.blank.clear()
        self.lock = lock
        self.unlocked: dict[str, int] = {}
        self._guard = threading.Lock()

    def __getitem__(self, key):
        value = super().__getitem__(key)
        time.sleep(0)  # the real one: the module's own sleep is a stand-in here
        return value

    def __missing__(self, key):
        return self.blank[key]

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value):
        if self.lock.owner != threading.get_ident():
            with self._guard:
                self.unlocked[str(key)] = self.unlocked.get(str(key), 0) + 1
        time.sleep(0)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


class TimeSpy:
    """The module's sleep (shared.learner_spies.replace_sleep): counts and times every sleep.

    meet=True: the first sleep of each thread that does not hold the lock waits at a barrier for
    the other thread's first such sleep -- the two threads are then sleeping at the same time, a
    fact that no timing can fake.  before_sleep: an Event every sleep waits for first (04.4's gate)."""

    def __init__(self, lock: TrackedLock | None, meet: bool, before_sleep: threading.Event | None):
        self.lock, self.before_sleep = lock, before_sleep
        self.calls = self.in_lock = 0
        self.total = self.asked = 0.0  # seconds slept; seconds the module asked for
        self._guard = threading.Lock()
        self.barrier = threading.Barrier(WORKERS, timeout=MEET_BOUND) if meet else None
        self.met = False  # the barrier opened: WORKERS threads were sleeping at once
        self._arrived: set[int] = set()

    def sleep(self, seconds):
        asked = float(seconds)
        seconds = max(asked, 0.0)
        holding = self.lock is not None and self.lock.owner == threading.get_ident()
        with self._guard:
            self.calls += 1
            self.asked += asked
            self.total += seconds
            self.in_lock += holding
            first = threading.get_ident() not in self._arrived
            self._arrived.add(threading.get_ident())
        if self.barrier is not None and first and not holding:
            try:
                self.barrier.wait()
                self.met = True
            except threading.BrokenBarrierError:
                pass  # the other thread never slept outside the lock: the judge says so
        if self.before_sleep is not None:
            self.before_sleep.wait(BOUND)
        time.sleep(seconds)


class CountingQueue:
    """The learner's own pending queue, seen through a view that notes every put() finding it full, i.e.
    every put that must wait.  consume() looks `pending` up at call time, so it uses the view too."""

    def __init__(self, queue: Queue):
        self.queue = queue
        self.found_full = 0
        self.held_back = threading.Event()

    def put(self, item, block=True, timeout=None):
        if self.queue.full():
            self.found_full += 1
            self.held_back.set()
        self.queue.put(item, block, timeout)

    def __getattr__(self, name):
        return getattr(self.queue, name)


class Run:
    """One fresh copy of the module; WORKERS daemon threads running its consume() (a consumer that never
    returns must not keep the probe alive), fed by this file's own producer."""

    def __init__(self, module):
        self.module = module
        self.spy: TimeSpy | None = None
        self.view: CountingQueue | None = None
        self.crashes: list[str] = []
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()

    def consume(self):
        try:
            self.module.consume()
        except BaseException as exc:  # an exception escaping consume() kills the thread: report it
            self.crashes.append(f"{type(exc).__name__}: {exc}")

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self.threads)

    def wait(self, done, threads, what: str, interval: float) -> dict:
        """Wait until done(), or until every live thread of `threads` is proved to wait forever: then where
        each waits.  Bounded: past BOUND it simply returns what it has."""
        stuck: dict = {}

        def over():
            if done():
                return True
            stuck.update(deadlocked(threads) or {})
            return bool(stuck)

        with contextlib.suppress(WaitTimeout):
            wait_until(over, BOUND, what, interval=interval)
        return stuck

    def answer(self, **facts) -> dict:
        return {**facts, "crashes": list(self.crashes)}


run: Run | None = None  # the current check's copy (checks run one after another)


def load() -> dict:
    """A fresh module object; which of the names the checks need it lacks; the capacity of its pending."""
    global run
    module = fresh_module("threaded_queue")
    run = Run(module)
    capacity = getattr(module.pending, "maxsize", 0) if hasattr(module, "pending") else None
    return {"missing": [name for name in NAMES if not hasattr(module, name)],
            "capacity": capacity if isinstance(capacity, (int, float)) else repr(capacity)}


def start(track_lock: bool = False, meet: bool = False, count_puts: bool = False, gate_on_full: bool = False) -> dict:
    """Install the stand-ins the judge asks for (none: the module runs untouched), then start the consumers.
    gate_on_full: every sleep begins only once a put has found the queue full (count_puts needed)."""
    module = run.module
    if track_lock or meet or count_puts:
        lock = None
        if track_lock:
            lock = module.mutex = TrackedLock()
        if count_puts:
            run.view = module.pending = CountingQueue(module.pending)
        gate = run.view.held_back if gate_on_full and run.view is not None else None
        run.spy = TimeSpy(lock, meet=meet, before_sleep=gate)
        replace_sleep(module, run.spy.sleep)
    run.started = time.monotonic()
    run.threads = [threading.Thread(target=run.consume, daemon=True, name=f"consumer-{n}") for n in range(WORKERS)]
    for thread in run.threads:
        thread.start()
    return {}


def contend() -> dict:
    """04.1 under contention: CONTEND_WORKERS threads run consume() on a queue already holding CONTEND_IDS ids
    and one None each, with the work's sleep a mere yield, a thread switch allowed every SWITCH seconds and
    counts a SeenCounts; wait until they return or are proved stuck.  The counts they left, and which keys
    were written by a thread not holding mutex."""
    module = run.module
    lock = module.mutex = TrackedLock()
    seen = module.counts = SeenCounts(module.counts if isinstance(module.counts, dict) else {}, lock)
    module.pending = filled = Queue()
    for item in [*range(CONTEND_IDS), *[None] * CONTEND_WORKERS]:
        filled.put(item)
    replace_sleep(module, lambda seconds: time.sleep(0))
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH)
    try:
        run.threads = [threading.Thread(target=run.consume, daemon=True, name=f"consumer-{n}")
                       for n in range(CONTEND_WORKERS)]
        for thread in run.threads:
            thread.start()
        stuck = run.wait(lambda: not run.alive(), run.threads, "consumers to exit", 0.01)
    finally:
        sys.setswitchinterval(before)
    if not stuck:
        stuck = {th.name: ["running", None] for th in run.threads if th.is_alive()}
    return run.answer(ids=CONTEND_IDS, workers=CONTEND_WORKERS, counts=dict(seen), unlocked=dict(seen.unlocked),
                      stuck=stuck or None)


def produce(ids: list) -> dict:
    """Put each id from a producer thread.  finished: the producer put them all; waits: how long each
    put() waited (evidence only); stuck: where the threads wait forever, when that is proved."""
    waits: list[float] = []

    def put_all():
        for item in ids:
            started = time.perf_counter()
            run.module.pending.put(item)
            waits.append(time.perf_counter() - started)

    producer = threading.Thread(target=put_all, daemon=True, name="producer")
    producer.start()
    stuck = run.wait(lambda: not producer.is_alive(), [producer, *run.threads], "the producer to put every id", 0.005)
    return run.answer(finished=not producer.is_alive(), stuck=stuck or None, waits=list(waits),
                      found_full=run.view.found_full if run.view is not None else None)


def wait_counted() -> dict:
    """Wait until done + failed reaches IDS (or no consumer is left, or all are proved stuck); the counts
    then, and how long after the consumers started (evidence only)."""
    run.wait(lambda: total(run.module.counts) >= IDS or not run.alive(), run.threads, "done + failed to reach 20",
             0.005)
    return run.answer(counts=dict(run.module.counts), elapsed=time.monotonic() - run.started)


def wait_exit() -> dict:
    """Wait until every consumer has returned (stuck None), or until those left are proved to wait forever
    (where each waits), or past BOUND ([running]).  Asked once nothing more will be put."""
    stuck = run.wait(lambda: not run.alive(), run.threads, "consumers to exit", 0.01)
    if not stuck:
        stuck = {th.name: ["running", None] for th in run.threads if th.is_alive()}
    return run.answer(stuck=stuck or None, alive=run.alive())


def observe(snapshot: bool = False) -> dict:
    """counts as they are now and what the sleeps did; snapshot: counts and errors, copied under the module's
    own mutex."""
    if snapshot:
        with run.module.mutex:
            return run.answer(counts=dict(run.module.counts), errors=list(run.module.errors))
    spy = run.spy and {name: getattr(run.spy, name) for name in ("calls", "in_lock", "met", "total", "asked")}
    return run.answer(counts=dict(run.module.counts), spy=spy)


def join() -> dict:
    """The get() calls never settled; if none, pending.join() in a daemon thread, waited for up to BOUND (it
    has no timeout of its own)."""
    unfinished = run.module.pending.unfinished_tasks
    if unfinished:
        return {"unfinished": unfinished, "returned": False}
    joiner, _ = start_call(run.module.pending.join, name="pending-join")
    joiner.join(BOUND)
    return {"unfinished": unfinished, "returned": not joiner.is_alive()}
