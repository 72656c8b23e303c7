"""Kit driver for lesson 05's checks (not a lesson file): `python lab05_driver.py pool_io.py`.

Runs the learner's script with runpy as `python pool_io.py` would, with recorders around
ThreadPoolExecutor.submit/shutdown, Future.result/cancel, Event.set/wait and time.sleep, and reports
(shared/probe_report.py) what happened: the events in the order they happened (one list, appended under a lock,
so events of one thread keep their order; each stamped with time.monotonic() for the report's
timeline figures), the script's outcome and the threads left at its end.

Two things make the run a matter of facts rather than of scheduling:
  - submit() returns once a free worker has picked the job up (a handshake with the worker thread).
    The script then meets the state the lesson describes -- the first job running, the second queued
    behind it -- however slowly the machine starts the worker thread;
  - every slice the job waits through (time.sleep, or stop.wait with a timeout) is recorded with
    whether its stop event was already set, so "it stops at the next slice" is counted, not timed.
"""

import concurrent.futures as cf
import sys
import threading
import time

from shared import probe_report
from shared.learner_spies import Lines, run_as_main

PICKUP_BOUND = 30.0  # a free worker picks a job up long before this, however loaded the machine

events, futures, stops = [], [], set()
guard = threading.Condition()
started: set[int] = set()        # jobs whose function began in a worker thread
busy: dict[int, int] = {}        # id(pool) -> jobs of that pool running now
job = threading.local()          # in a worker thread: (job number, its stop event or None)

# The originals, kept before the recorders below replace them.
real_submit = cf.ThreadPoolExecutor.submit
real_shutdown = cf.ThreadPoolExecutor.shutdown
real_cancel = cf.Future.cancel
real_result = cf.Future.result
real_set = threading.Event.set
real_wait = threading.Event.wait
real_sleep = time.sleep


def log(**event):
    with guard:
        event["at"] = time.monotonic()  # for the figures only: checks judge the order, never the times
        events.append(event)


def number(future):
    for n, known in enumerate(futures, 1):
        if known is future:
            return n
    return 0


def state(future):
    if future.cancelled():
        return "cancelled"
    return "running" if future.running() else "done" if future.done() else "pending"


def submit(self, fn, /, *args, **kwargs):
    with guard:
        futures.append(None)
        n = len(futures)
    stop = next((arg for arg in args if isinstance(arg, threading.Event)), None)
    if stop is not None:
        stops.add(id(stop))

    def traced(*a, **k):
        with guard:
            started.add(n)
            busy[id(self)] = busy.get(id(self), 0) + 1
            guard.notify_all()
        job.current = (n, stop)
        log(ev="start", f=n, thread=threading.current_thread().name)
        try:
            value = fn(*a, **k)
        except BaseException as exc:
            log(ev="end", f=n, error=type(exc).__name__)
            raise
        finally:
            job.current = None
            with guard:
                busy[id(self)] -= 1
        log(ev="end", f=n, value=repr(value)[:100])
        return value

    future = real_submit(self, traced, *args, **kwargs)
    futures[n - 1] = future
    log(ev="submit", f=n, workers=self._max_workers, fn=getattr(fn, "__name__", "?"), args=repr(args)[:80])
    with guard:  # the handshake: a job a free worker can take is running before submit returns
        guard.wait_for(lambda: n in started or future.done() or busy.get(id(self), 0) >= self._max_workers,
                       timeout=PICKUP_BOUND)
    return future


def shutdown(self, wait=True, *, cancel_futures=False):
    real_shutdown(self, wait=wait, cancel_futures=cancel_futures)
    log(ev="shutdown", wait=wait)


def cancel(self):
    before = state(self)
    value = real_cancel(self)
    log(ev="cancel", f=number(self), before=before, value=value)
    return value


def result(self, timeout=None):
    before, began = state(self), time.monotonic()
    try:
        value = real_result(self, timeout)
    except BaseException as exc:
        log(ev="result", f=number(self), timeout=timeout, before=before, error=type(exc).__name__,
            waited=round(time.monotonic() - began, 3), began=began)  # evidence only
        raise
    log(ev="result", f=number(self), timeout=timeout, before=before, value=repr(value)[:100],
        waited=round(time.monotonic() - began, 3), began=began)
    return value


def slice_begins():
    """A job's worker thread starts waiting through one slice: note whether its stop was set already."""
    current = getattr(job, "current", None)
    if current is not None:
        n, stop = current
        log(ev="slice", f=n, after_stop=bool(stop is not None and stop.is_set()))


def set_event(self):
    if id(self) in stops:
        log(ev="set")
    real_set(self)


def wait_event(self, timeout=None):
    if timeout is not None and id(self) in stops:
        slice_begins()
    return real_wait(self, timeout)


def sleep(seconds):
    slice_begins()
    real_sleep(seconds)


cf.ThreadPoolExecutor.submit = submit
cf.ThreadPoolExecutor.shutdown = shutdown
cf.Future.cancel = cancel
cf.Future.result = result
threading.Event.set = set_event
threading.Event.wait = wait_event
time.sleep = sleep


def main(script: str) -> int:
    sys.stdout = Lines(sys.stdout, lambda line: log(ev="print", text=line))
    outcome = run_as_main(script)
    sys.stdout.flush()
    left = [th.name for th in threading.enumerate() if th is not threading.main_thread() and th.is_alive()]
    # default=None: a value JSON cannot carry fails here, and the judge finds no record
    probe_report.write({"events": events, "outcome": outcome, "threads_left": left}, default=None)
    return 0 if outcome == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
