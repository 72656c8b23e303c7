"""What kit probes install next to learner code to see what it does.

A probe (shared/probe.py, or a kit runner such as lab02_note.py) runs in a process of its own beside the
learner's files; these are the stand-ins it puts where the learner's code looks things up, and the runs
it starts.  Each only records or passes through -- a verdict is the judge's, never made here.  Imported
next to learner code, so it imports nothing heavy at load time and never the judge.

    Lines(sys.stdout, on_line)      stdout that passes text through and hands on each finished line
    run_as_main(script)             runs a script as `python SCRIPT` would; how it ended, as text
    fresh_module(name)              a new copy of the learner's NAME.py (its own globals to patch)
    start_call(fn, *args)           fn(*args) in a daemon thread: what it returned or raised, and when
    ModuleView(module, name=value)  a module as learner code sees it, with some names replaced
    replace_time(globals, attr, fn) time.ATTR as learner code finds it, however it imported it, becomes fn
    replace_sleep(module, sleep)    the same for a module's sleep, undoable
    watch_loop_sleeps(note)         time.sleep called on a running event loop's thread is noted
    LoopTurn()                      did the event loop run anything since this was made?
    publish_after_takeover(event)   publisher.publish_one() while another publisher takes its claim over
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


class Lines:
    """Stands in for sys.stdout: passes everything through and calls on_line(line) for each finished line
    (without its newline), in the thread that printed it -- so the recorder can stamp it with what it
    needs (a clock, a sequence number, the task that printed it)."""

    def __init__(self, real, on_line):
        self.real, self.on_line, self.buffer = real, on_line, ""

    def write(self, text):
        self.real.write(text)
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self.on_line(line)
        return len(text)

    def flush(self):
        self.real.flush()

    def __getattr__(self, name):
        return getattr(self.real, name)


def run_as_main(script: str, print_crash: bool = True) -> str:
    """Run SCRIPT as `python SCRIPT` would (runpy, as __main__) and say how it ended: "ok" (also a
    SystemExit with code 0 or None), "SystemExit: CODE" or "TYPE: MESSAGE".  A crash is not raised: the
    caller keeps the facts gathered so far; print_crash: its traceback goes to stderr, as Python would."""
    import runpy

    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return f"SystemExit: {exc.code}"
    except BaseException as exc:
        if print_crash:
            import traceback
            traceback.print_exc()
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def fresh_module(name: str, folder: Path | None = None):
    """A new module object from NAME.py in `folder` (the current one: the learner's work folder), run from
    the top: its counters start at zero whatever an earlier copy did, and its globals are this copy's to
    patch.  Not put in sys.modules; its own imports resolve normally."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, (folder or Path.cwd()) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_call(fn, *args, name: str | None = None):
    """Run fn(*args) in a daemon thread (one that never returns cannot keep the probe alive); returns the
    thread, for a bounded join, and a dict that gets "value" or "error" (what it raised) and "seconds"."""
    import threading

    box: dict = {}

    def run():
        started = time.monotonic()
        try:
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    return thread, box


class ModuleView:
    """What learner code sees under a module's name (module.asyncio = ModuleView(asyncio, timeout=mine)): the
    real module, except for the names given."""

    def __init__(self, module, **replaced):
        vars(self).update(replaced)
        self._view_of = module

    def __getattr__(self, name):
        return getattr(self._view_of, name)


def replace_time(namespace: dict, attr: str, stand_in) -> dict:
    """Make `stand_in` the time.ATTR that learner code finds in `namespace` (a module's globals: vars(module),
    or a function's __globals__), whichever way it imported it: `import time` and `import time as clock`
    get a ModuleView of time, `from time import ATTR` gets stand_in.  Only these names change, time itself
    stays.  Returns {name: what it was} of each name replaced (namespace.update(it) undoes it)."""
    view = ModuleView(time, **{attr: stand_in})
    original = getattr(time, attr)
    replaced = {}
    for name, value in list(namespace.items()):
        if value is time or value is original:
            replaced[name] = value
            namespace[name] = view if value is time else stand_in
    return replaced


def replace_sleep(module, sleep) -> callable:
    """replace_time for a module's sleep; returns what undoes it."""
    replaced = replace_time(vars(module), "sleep", sleep)
    return lambda: vars(module).update(replaced)


def watch_loop_sleeps(note) -> None:
    """Replace time.sleep everywhere (before the learner's module is imported, so `from time import sleep`
    gets it too): a call made on the thread of a running event loop -- a blocking sleep nothing else can
    run during -- calls note("FILE:LINE", function, seconds) with where it was made, then sleeps."""
    import asyncio

    real_sleep = time.sleep

    def watched_sleep(seconds):
        if asyncio._get_running_loop() is not None:
            frame = sys._getframe(1)
            note(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}", frame.f_code.co_name, seconds)
        real_sleep(seconds)

    time.sleep = watched_sleep


class LoopTurn:
    """Made on a running event loop: schedules a callback for the loop's next turn.  If `turned` is still
    False when the work that began then is over, that work never gave the loop back -- no other task ran
    while it did.  cancel() drops the callback once the answer is read."""

    def __init__(self, loop=None):
        import asyncio

        self.turned = False
        self.handle = (loop or asyncio.get_running_loop()).call_soon(self._turn)

    def _turn(self):
        self.turned = True

    def cancel(self):
        self.handle.cancel()


def publish_after_takeover(event_id: str):
    """The learner's publisher.publish_one() while its claim_event is wrapped: once the learner's claim
    returns this event, the kit claims it for another publisher (a new claim_token, 30 s ahead), as if ours
    ran out while we sent.  publish_one's return value; claim_event is put back afterwards.  (Lessons 12
    and 15: a confirm must hold the claim's token.)"""
    from uuid import uuid4

    import publisher

    from shared.lesson_db import sql
    real_claim = publisher.claim_event

    def claim_then_lose():
        claimed = real_claim()
        if claimed is not None and str(claimed.get("id")) == event_id:
            sql("UPDATE export_outbox SET claim_token=%s, claim_until=DATE_ADD(NOW(6), INTERVAL 30 SECOND) "
                "WHERE id=%s", (str(uuid4()), event_id))
        return claimed

    publisher.claim_event = claim_then_lose
    try:
        return publisher.publish_one()
    finally:
        publisher.claim_event = real_claim
