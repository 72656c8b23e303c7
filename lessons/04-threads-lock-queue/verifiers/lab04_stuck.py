"""Kit helper for lesson 04's checks (not a lesson file): prove from their stacks that threads wait forever.

A thread waits forever when it waits, without a timeout, for something only another thread can bring:
an item from an empty queue, room in a full queue, a task_done() that brings the count to zero, the end
of another thread.  When every thread of a group waits like that, what it waits for is still missing, and
each is still parked in the very same frame after that was read (so none of them moved in between, and
none put, took or settled anything), none of them can ever move again.  That is a deadlock proved from the
threads themselves, not from how long they have been quiet.  A wait this module does not know is never
called stuck.

    python lab04_stuck.py threaded_queue.py     runs the script as `python threaded_queue.py` would; if its
                                                threads deadlock, reports (shared/probe_report.py) where
                                                each waits, and exits with code 3

deadlocked() says where each thread waits as plain data, {name: [what, detail]}: it runs next to learner
code (in a probe, in the watchdog above) and its answer travels to the judge, which words it (describe).
"""

from __future__ import annotations

import os
import queue
import runpy
import sys
import threading
import time

from shared import probe_report
from shared.i18n import t

STUCK_EXIT = 3
LOOK_EVERY = 0.05  # how often the watchdog looks; the verdict never depends on it


QUEUE_WAITS = {queue.Queue.get.__code__: "get", queue.Queue.put.__code__: "put", queue.Queue.join.__code__: "join"}


def _wait_of(frame) -> tuple[str, object] | None:
    """(what, on what) when the innermost frame is a wait without a timeout that we know; else None."""
    code = frame.f_code
    here = frame.f_locals
    if code is threading.Condition.wait.__code__:
        caller = frame.f_back
        outer = caller.f_locals if caller is not None else {}
        what = QUEUE_WAITS.get(caller.f_code) if caller is not None else None
        # Queue.join takes no timeout: its `timeout` is always missing, read as None.
        if here.get("timeout") is not None or what is None or outer.get("timeout") is not None \
                or not isinstance(outer.get("self"), queue.Queue):
            return None
        return what, outer["self"]
    if code.co_name == "_wait_for_tstate_lock" and here.get("timeout") == -1 and here.get("block", True):
        caller = frame.f_back  # Python <= 3.12: Thread.join -> _wait_for_tstate_lock
        if caller is not None and caller.f_code is threading.Thread.join.__code__ \
                and caller.f_locals.get("timeout") is None:
            return "thread", here.get("self")
        return None
    if code is threading.Thread.join.__code__ and here.get("timeout") is None:
        return "thread", here.get("self")  # Python >= 3.13 waits inside join itself
    return None


def _still_blocked(what: str, target) -> bool:
    """Is the thing this wait needs still missing?"""
    if what == "get":
        return target.qsize() == 0
    if what == "put":
        return target.full()
    if what == "join":
        return target.unfinished_tasks > 0
    return isinstance(target, threading.Thread) and target.is_alive()


def _fact(what: str, target) -> list:
    """Where one thread waits, as plain data: [what, detail]."""
    if what == "join":
        return [what, target.unfinished_tasks]  # the get() calls nobody will task_done()
    if what == "thread":
        return [what, str(getattr(target, "name", target))]
    return [what, None]


def describe(what: str, detail=None) -> str:
    """One thread's wait, [what, detail] from deadlocked(), in the learner's words."""
    if what == "get":
        return t("waits in get() on an empty queue")
    if what == "put":
        return t("waits in put() on a full queue")
    if what == "join":
        return t("waits in join() for {detail} get() call(s) nobody will task_done()", detail=detail)
    if what == "running":
        return "still running"  # not proved stuck: only past the bound
    return t("waits in join() for {detail}", detail=detail)


def deadlocked(threads: list[threading.Thread]) -> dict[str, list] | None:
    """{thread name: [what, detail]} when every live thread of the group waits forever; else None.
    Call it when nothing outside the group will put, take or settle anything any more."""
    live = [th for th in threads if th.is_alive()]
    if not live:
        return None
    first = sys._current_frames()
    waits = {}
    for th in live:
        frame = first.get(th.ident)
        found = _wait_of(frame) if frame is not None else None
        if found is None or not _still_blocked(*found):
            return None
        waits[th] = (frame, found)
    second = sys._current_frames()  # taken after the reads above: a thread that moved has a new frame
    if any(second.get(th.ident) is not frame or not _still_blocked(*found) for th, (frame, found) in waits.items()):
        return None
    return {th.name: _fact(*found) for th, (_, found) in waits.items()}


def _watch() -> None:
    me = threading.current_thread()
    while True:
        time.sleep(LOOK_EVERY)
        stuck = deadlocked([th for th in threading.enumerate() if th is not me])
        if stuck:
            try:
                probe_report.write(stuck)
            finally:
                os._exit(STUCK_EXIT)  # the deadlocked threads would keep the interpreter forever


def main(script: str) -> None:
    threading.Thread(target=_watch, name="lab04-watchdog", daemon=True).start()
    runpy.run_path(script, run_name="__main__")
    # The interpreter would now wait for the script's non-daemon threads: wait here, in join(),
    # where the watchdog can see it.
    for th in threading.enumerate():
        if th is not threading.current_thread() and not th.daemon:
            th.join()


if __name__ == "__main__":
    main(sys.argv[1])
