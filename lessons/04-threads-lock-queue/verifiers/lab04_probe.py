"""Runs in a probe next to the learner's threaded_queue.py (shared/probe.py): lesson 04's scenarios.

Each run is one fresh copy of threaded_queue.py (its counters start at zero whatever an earlier check
did), known to the judge by its number.  The judge asks, step by step: load, instrument, start the
consumers, produce, wait; each step answers with what it saw -- counts, errors, crashes, whether the
producer finished, where threads wait forever (lab04_stuck.py, from their stacks), what the sleeps did
-- as plain data.  Observations, never verdicts: the judge decides.  Every wait here is bounded (BOUND),
and the judge's call has a timeout beyond it.

Instrumentation replaces module globals: `time` (to count the sleeps and note the seconds asked for),
`mutex` (to know which thread holds it) and, for the exercise, `pending` (a view of the learner's own
queue that counts the puts that found it full).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import threading
import time
from pathlib import Path
from queue import Queue

from lab04_stuck import deadlocked
from shared.proc import WaitTimeout, wait_until

SCRIPT = "threaded_queue.py"
NAMES = ("pending", "mutex", "counts", "errors", "consume")
IDS = 20
WORKERS = 2
BOUND = 30.0  # backstop for waits that facts normally end in well under a second
MEET_BOUND = 15.0  # 04.3's barrier gives up after this (shorter than BOUND, so the producer outlasts it)


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

    def held_here(self) -> bool:
        return self.owner == threading.get_ident()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


class TimeSpy:
    """Replaces the module's `time`: counts and times every sleep, passes everything else through.

    meet=True: the first sleep of each thread that does not hold the lock waits at a barrier for
    the other thread's first such sleep -- the two threads are then sleeping at the same time, a
    fact that no timing can fake.  before_sleep: an Event every sleep waits for first (04.4's gate)."""

    def __init__(self, lock: TrackedLock | None = None, at_least: float = 0.0, meet: bool = False,
                 before_sleep: threading.Event | None = None):
        self.lock, self.at_least, self.before_sleep = lock, at_least, before_sleep
        self.calls = self.active = self.max_active = self.in_lock = 0
        self.total = self.asked = 0.0  # seconds slept; seconds the module asked for
        self._guard = threading.Lock()
        self.barrier = threading.Barrier(WORKERS, timeout=MEET_BOUND) if meet else None
        self.met = False  # the barrier opened: WORKERS threads were sleeping at once
        self._arrived: set[int] = set()

    def sleep(self, seconds):
        asked = float(seconds)
        seconds = max(asked, self.at_least)
        holding = self.lock is not None and self.lock.held_here()
        with self._guard:
            self.calls += 1
            self.asked += asked
            self.total += seconds
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.in_lock += holding
            first = threading.get_ident() not in self._arrived
            self._arrived.add(threading.get_ident())
        try:
            if self.barrier is not None and first and not holding:
                try:
                    self.barrier.wait()
                    self.met = True
                except threading.BrokenBarrierError:
                    pass  # the other thread never slept outside the lock: the judge says so
            if self.before_sleep is not None:
                self.before_sleep.wait(BOUND)
            time.sleep(seconds)
        finally:
            with self._guard:
                self.active -= 1

    def __getattr__(self, name):
        return getattr(time, name)

    def install(self, module) -> None:
        # Whatever name the module uses: `import time`, `import time as clock`, `from time import sleep`.
        for name, value in list(vars(module).items()):
            if value is time:
                setattr(module, name, self)
            elif value is time.sleep:
                setattr(module, name, self.sleep)

    def seen(self) -> dict:
        return {"calls": self.calls, "in_lock": self.in_lock, "met": self.met, "total": self.total,
                "asked": self.asked, "max_active": self.max_active}


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
        self.lock: TrackedLock | None = None
        self.view: CountingQueue | None = None
        self.spy: TimeSpy | None = None
        self.crashes: list[str] = []
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()

    def _consume(self):
        try:
            self.module.consume()
        except BaseException as exc:  # an exception escaping consume() kills the thread: report it
            self.crashes.append(f"{type(exc).__name__}: {exc}")

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self.threads)


_runs: dict[int, Run] = {}
_numbers = itertools.count(1)


def load() -> dict:
    """A fresh module object; which of the names the checks need it lacks; the capacity of its pending."""
    path = Path.cwd() / SCRIPT
    spec = importlib.util.spec_from_file_location("threaded_queue", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    number = next(_numbers)
    _runs[number] = Run(module)
    capacity = getattr(module.pending, "maxsize", 0) if hasattr(module, "pending") else None
    return {"run": number, "missing": [name for name in NAMES if not hasattr(module, name)],
            "capacity": capacity if isinstance(capacity, (int, float)) else repr(capacity)}


def instrument(number: int, track_lock: bool = False, meet: bool = False, count_puts: bool = False,
               gate_on_full: bool = False) -> dict:
    """Install the stand-ins the judge asks for.  gate_on_full: every sleep begins only once a put has
    found the queue full (count_puts needed)."""
    run = _runs[number]
    if track_lock:
        run.lock = run.module.mutex = TrackedLock()
    if count_puts:
        run.view = run.module.pending = CountingQueue(run.module.pending)
    gate = run.view.held_back if gate_on_full and run.view is not None else None
    run.spy = TimeSpy(run.lock, meet=meet, before_sleep=gate)
    run.spy.install(run.module)
    return {}


def start(number: int) -> dict:
    run = _runs[number]
    run.started = time.monotonic()
    run.threads = [threading.Thread(target=run._consume, daemon=True, name=f"consumer-{n}")
                   for n in range(WORKERS)]
    for thread in run.threads:
        thread.start()
    return {}


def produce(number: int, ids: list) -> dict:
    """Put each id from a producer thread.  finished: the producer put them all; waits: how long each
    put() waited (evidence only); stuck: where the threads wait forever, when that is proved."""
    run = _runs[number]
    waits: list[float] = []

    def put_all():
        for item in ids:
            started = time.perf_counter()
            run.module.pending.put(item)
            waits.append(time.perf_counter() - started)

    producer = threading.Thread(target=put_all, daemon=True, name="producer")
    producer.start()
    stuck: dict = {}

    def finished():
        if not producer.is_alive():
            return True
        stuck.update(deadlocked([producer, *run.threads]) or {})
        return bool(stuck)

    with contextlib.suppress(WaitTimeout):
        wait_until(finished, BOUND, "the producer to put every id", interval=0.005)
    return {"finished": not producer.is_alive(), "stuck": stuck or None, "waits": list(waits),
            "crashes": list(run.crashes), "found_full": run.view.found_full if run.view is not None else None}


def wait_counted(number: int) -> dict:
    """Wait until done + failed reaches IDS (or no consumer is left, or all are proved stuck); the counts
    then, and how long after the consumers started (evidence only)."""
    run = _runs[number]
    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: total(run.module.counts) >= IDS or not run.alive() or deadlocked(run.threads),
                   BOUND, "done + failed to reach 20", interval=0.005)
    return {"counts": dict(run.module.counts), "elapsed": time.monotonic() - run.started,
            "crashes": list(run.crashes)}


def wait_exit(number: int) -> dict:
    """Wait until every consumer has returned (stuck None), or until those left are proved to wait forever
    (where each waits), or past BOUND ([running]).  Asked once nothing more will be put."""
    run = _runs[number]
    found: dict = {}

    def settled():
        if not run.alive():
            return True
        found.update(deadlocked(run.threads) or {})
        return bool(found)

    try:
        wait_until(settled, BOUND, "consumers to exit", interval=0.01)
    except WaitTimeout:
        found = {th.name: ["running", None] for th in run.threads if th.is_alive()}
    return {"stuck": found or None, "alive": run.alive(), "crashes": list(run.crashes)}


def snapshot(number: int) -> dict:
    """counts and errors, copied under the module's own mutex."""
    run = _runs[number]
    with run.module.mutex:
        counts, errors = dict(run.module.counts), list(run.module.errors)
    return {"counts": counts, "errors": errors, "crashes": list(run.crashes)}


def observe(number: int) -> dict:
    """counts as they are now, what the sleeps did, how many puts found the queue full."""
    run = _runs[number]
    return {"counts": dict(run.module.counts), "spy": run.spy.seen() if run.spy is not None else None,
            "found_full": run.view.found_full if run.view is not None else None}


def unfinished(number: int) -> dict:
    return {"unfinished": _runs[number].module.pending.unfinished_tasks}


def join(number: int) -> dict:
    """pending.join() in a daemon thread, waited for up to BOUND (it has no timeout of its own)."""
    joiner = threading.Thread(target=_runs[number].module.pending.join, daemon=True, name="pending-join")
    joiner.start()
    joiner.join(BOUND)
    return {"returned": not joiner.is_alive()}
