"""Runs in a probe interpreter next to the learner's cpu_work.py, process_export.py and verify_process.py:
lesson 06's scenarios.  The judge (lab06_verify.py) starts one fresh interpreter per scenario:

    python -c 'import lab06_learner as p; p.probe()' MODE ARGS...     (cwd: the work folder)

It swaps in a recording ProcessPoolExecutor subclass and a recording score_text, runs the learner's
script or main() with real spawned workers, and writes one JSON report (shared/probe_report.py): what
was built, sent and handed back, and when.  Observations, never verdicts.

The pool_* targets live at module level here: a spawned worker unpickles them by module + name and
imports this file, as it imports cpu_work (spawn gives the workers the probe's sys.path, whose first
entry is the work folder, where the kit lays this file).  Importing it has no side effects and loads no
learner code; that happens only inside probe().
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path


_REC: dict = {}


def _new_record() -> dict:
    return {"pools": [], "targets": [], "pool_calls": [], "pool_results": [], "serial": [],
            "lines": [], "error": None, "steps": []}


def _key(args, kwargs) -> list:
    """What one score_text call was asked: [len(text), crc32(text), rounds]."""
    import zlib
    text = args[0] if args else kwargs.get("text")
    rounds = args[1] if len(args) > 1 else kwargs.get("rounds")
    rounds = rounds if isinstance(rounds, (int, float, str, type(None))) else repr(rounds)[:40]
    if isinstance(text, str):
        return [len(text), zlib.crc32(text.encode("utf-8")), rounds]
    return [None, repr(text)[:40], rounds]


def _fake(args, kwargs) -> int:
    # Depends on the text only, so serial and pool agree whatever rounds each side uses:
    # the timing and fault probes must not trip over a results problem (that is 06.1's job).
    crc = _key(args, kwargs)[1]
    return crc % 1000003 if isinstance(crc, int) else 0


def pool_equal(*args, **kwargs) -> int:
    """Pool target for the timing probe: instant, and equal to the serial fake."""
    return _fake(args, kwargs)


def pool_mismatch(*args, **kwargs) -> int:
    """Pool target for 06.1: every result one off from the serial side."""
    return _fake(args, kwargs) + 1


def pool_die(*args, **kwargs):
    """Pool target for 06.5: the worker vanishes without a word, like an OOM kill."""
    os._exit(17)


def pool_timed(fn, log_path, *args, **kwargs):
    """Pool target for the figures (real runs only): runs the learner's function unchanged and notes, in
    the worker, its process id and when the call began and ended (perf_counter: one clock for every
    process of the machine).  Only fn's value or exception ever leaves; a note that cannot be written is
    left out."""
    started = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        try:
            with open(log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps([os.getpid(), started, time.perf_counter(), _key(args, kwargs)[2]]) + "\n")
        except Exception:  # noqa: BLE001 - only a figure needs it
            pass


def _plain(value):
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)[:80]


def _describe_target(fn) -> dict:
    """Can a worker find fn again by importing fn.__module__ and walking fn.__qualname__?"""
    import functools
    import importlib
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    module = getattr(inner, "__module__", None)
    qualname = getattr(inner, "__qualname__", None) or repr(inner)
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        importable = found is inner and "<" not in qualname
    except Exception:
        importable = False
    return {"module": module, "qualname": qualname, "importable": importable}


def _describe_error(exc: BaseException) -> dict:
    import pickle
    import traceback
    from concurrent.futures.process import BrokenProcessPool
    text = str(exc)
    # Raised while the pool pickled a call: Python 3.13 says "Can't get local object" (an AttributeError)
    # where 3.11 and 3.12 say "Can't pickle local object", but every one is raised inside multiprocessing's
    # reduction.dumps, as the traceback the pool hands back shows.
    pickling = any(frame.name == "dumps" and frame.filename.endswith(os.path.join("multiprocessing", "reduction.py"))
                   for frame in traceback.extract_tb(exc.__traceback__))
    # The learner's own line that raised (an assert of theirs, say): the innermost frame in the work folder.
    here = os.getcwd() + os.sep
    own = [frame.line for frame in traceback.extract_tb(exc.__traceback__)
           if os.path.abspath(frame.filename).startswith(here) and not frame.filename.endswith("lab06_learner.py")]
    return {
        "type": type(exc).__name__,
        "line": (own[-1] or "")[:200] if own else "",
        "message": text[:400],
        "bpp": isinstance(exc, BrokenProcessPool),
        "pickle": isinstance(exc, pickle.PicklingError) or "pickl" in text.lower() or pickling,
        "tail": "".join(traceback.format_exception(exc)).rstrip().splitlines()[-6:],
    }


def _nudge(manager, wakeup, lock, done) -> None:
    """Wake a pool's manager thread every 50 ms until shutdown() has returned (see RecordingPool.shutdown).
    Under the pool's shutdown lock, as the pool itself wakes it; a wake-up of a closed pool is a no-op."""
    while not done.wait(0.05) and manager.is_alive():
        with lock:
            wakeup.wakeup()


def _recording_pool(swap, timed: str | None = None):
    """A ProcessPoolExecutor that records how it is built and used; `swap` replaces its target.
    `timed`: a file the workers note each call's time span in (for the figures), when the target is one a
    worker can import by name anyway -- so the wrapper can never make a target fail that would not."""
    import concurrent.futures.process as cfp
    import functools
    import inspect

    real = cfp.ProcessPoolExecutor

    class RecordingPool(real):
        def __init__(self, *args, **kwargs):
            info = {"t_init": time.perf_counter()}
            try:
                bound = inspect.signature(real.__init__).bind(self, *args, **kwargs).arguments
            except TypeError:
                bound = {}
            context = bound.get("mp_context")
            info["max_workers"] = _plain(bound.get("max_workers"))
            info["explicit"] = context.get_start_method() if context is not None else None
            _REC["pools"].append(info)
            super().__init__(*args, **kwargs)
            effective = getattr(self, "_mp_context", None)
            info["effective"] = effective.get_start_method() if effective is not None else None
            self._lab_info = info

        def _target(self, fn):
            described = _describe_target(fn)
            _REC["targets"].append(described)
            if swap is None and timed and described["importable"]:
                return functools.partial(pool_timed, fn, timed)
            return fn if swap is None else swap

        def map(self, fn, *iterables, **kwargs):
            # Workers start on the first submit, not in __init__: time the pool from here.
            self._lab_info.setdefault("t_submit", time.perf_counter())
            iterables = [list(items) for items in iterables]
            first = len(_REC["pool_calls"])
            # As map(): the calls end with the shortest iterable.
            _REC["pool_calls"].extend(_key(list(call), {}) for call in zip(*iterables, strict=False))
            results = super().map(self._target(fn), *iterables, **kwargs)

            def collect():
                for offset, value in enumerate(results):
                    _REC["pool_results"].append([first + offset, _plain(value), time.perf_counter()])
                    yield value
            return collect()

        def submit(self, fn, /, *args, **kwargs):
            if isinstance(fn, functools.partial) and fn.func is cfp._process_chunk:
                return super().submit(fn, *args, **kwargs)  # map's own batches: already recorded
            self._lab_info.setdefault("t_submit", time.perf_counter())
            index = len(_REC["pool_calls"])
            _REC["pool_calls"].append(_key(args, kwargs))
            future = super().submit(self._target(fn), *args, **kwargs)

            def done(f):
                if not f.cancelled() and f.exception() is None:
                    _REC["pool_results"].append([index, _plain(f.result()), time.perf_counter()])
            future.add_done_callback(done)
            return future

        def shutdown(self, wait=True, *, cancel_futures=False):
            # CPython before 3.11.4 (gh-94440; Debian 12's python3 is 3.11.2): once map() has failed and
            # cancelled its other calls, the pool's manager thread can wait for a wake-up that never
            # comes, and shutdown(wait=True) -- the end of the learner's `with` -- never returns.  Waking
            # it again while shutdown waits changes nothing on a fixed Python and ends the wait here.
            manager, done = self._executor_manager_thread, threading.Event()
            if wait and manager is not None:
                threading.Thread(target=_nudge, daemon=True, args=(manager, self._executor_manager_thread_wakeup,
                                                                   self._shutdown_lock, done)).start()
            try:
                return super().shutdown(wait, cancel_futures=cancel_futures)
            finally:
                done.set()
                self._lab_info["t_shutdown"] = time.perf_counter()

    return RecordingPool


def _install(fake: str, timed: str | None = None) -> None:
    """Put the recording pool and a recording score_text where the learner's imports find them."""
    import concurrent.futures as cf
    import concurrent.futures.process as cfp
    import cpu_work

    swap = {"real": None, "equal": pool_equal, "mismatch": pool_mismatch, "die": pool_die}[fake]
    cf.ProcessPoolExecutor = cfp.ProcessPoolExecutor = _recording_pool(swap, timed)
    real_score = cpu_work.score_text

    def score_text(*args, **kwargs):
        started = time.perf_counter()
        value = real_score(*args, **kwargs) if fake == "real" else _fake(args, kwargs)
        _REC["serial"].append([_key(args, kwargs), _plain(value), started, time.perf_counter()])
        return value

    # Pickle sends functions by module + name: this stand-in answers to cpu_work.score_text,
    # so a spawned worker that unpickles it imports cpu_work and gets the learner's real one.
    score_text.__module__, score_text.__name__, score_text.__qualname__ = "cpu_work", "score_text", "score_text"
    cpu_work.score_text = score_text


def _attempt(action) -> None:
    _REC["t_start"] = time.perf_counter()
    try:
        action()
    except BaseException as exc:  # SystemExit too: the verdict is ours to give
        _REC["error"] = _describe_error(exc)


def _probe_imports() -> None:
    """Import the lesson files the way a spawned worker would; any pool or process is a trip."""
    import concurrent.futures as cf
    import concurrent.futures.process as cfp
    import importlib
    import multiprocessing.process
    import runpy

    class Tripped(RuntimeError):
        pass

    step = {"name": ""}

    class NoPool:
        def __init__(self, *args, **kwargs):
            _REC["steps"][-1]["pools"] += 1
            raise Tripped(f"ProcessPoolExecutor() called while running: {step['name']}")

    def no_start(self):
        _REC["steps"][-1]["processes"] += 1
        raise Tripped(f"Process.start() called while running: {step['name']}")

    cf.ProcessPoolExecutor = cfp.ProcessPoolExecutor = NoPool
    multiprocessing.process.BaseProcess.start = no_start
    plan = [
        ("import cpu_work", lambda: importlib.import_module("cpu_work")),
        ("import process_export", lambda: importlib.import_module("process_export")),
        ("process_export.py as __mp_main__", lambda: runpy.run_path("process_export.py", run_name="__mp_main__")),
        ("import verify_process", lambda: importlib.import_module("verify_process")),
        ("verify_process.py as __mp_main__", lambda: runpy.run_path("verify_process.py", run_name="__mp_main__")),
    ]
    for name, action in plan:
        step["name"] = name
        _REC["steps"].append({"name": name, "pools": 0, "processes": 0, "error": None})
        try:
            action()
        except BaseException as exc:
            _REC["steps"][-1]["error"] = _describe_error(exc)


def _worker_calls(path: str | None) -> list:
    """[pid, start, end, rounds] of each pool call, as the workers noted them (the figures' evidence)."""
    calls = []
    if path:
        with contextlib.suppress(OSError):
            for line in Path(path).read_text(encoding="utf-8").splitlines()[:400]:
                with contextlib.suppress(ValueError):
                    calls.append(json.loads(line))
            Path(path).unlink(missing_ok=True)
    return calls


def probe() -> None:
    """Entry point of a probe interpreter: python -c 'import lab06_learner as p; p.probe()' MODE ..."""
    import runpy

    from shared.learner_spies import Lines
    from shared.logs import LOG_DIR

    mode, *args = sys.argv[1:]
    _REC.update(_new_record())
    sys.stdout = Lines(sys.stdout, lambda line: _REC["lines"].append([time.perf_counter(), line]))
    if mode == "imports":
        _probe_imports()
    elif mode == "script":  # run a lesson script as `python FILE [ARGS]` would, with the recorders in place
        path, fake, *extra = args
        timed = None
        if fake == "real":  # the workers note their calls' time spans here, for the figures
            timed = str(LOG_DIR / f"workers-{os.getpid()}.jsonl")
            with contextlib.suppress(OSError):
                LOG_DIR.mkdir(parents=True, exist_ok=True)
                Path(timed).unlink(missing_ok=True)
        _attempt(lambda: _install(fake, timed))
        if _REC["error"] is None:
            sys.argv = [path, *extra]
            _attempt(lambda: runpy.run_path(path, run_name="__main__"))
        _REC["worker_calls"] = _worker_calls(timed)
    elif mode == "local":  # 06.4: the target becomes a function defined inside another function
        def run():
            import cpu_work
            _install("real")
            import process_export
            _REC.update(_new_record(), t_start=time.perf_counter())  # only main() below counts

            def local_score(text, rounds=1):  # lives only inside run(): pickle cannot name it
                return len(text) + int(rounds)
            cpu_work.score_text = process_export.score_text = local_score
            process_export.main()
        _attempt(run)
    else:
        raise SystemExit(f"unknown probe mode {mode!r}")
    sys.stdout = sys.__stdout__
    from shared import probe_report
    probe_report.write(_REC)
