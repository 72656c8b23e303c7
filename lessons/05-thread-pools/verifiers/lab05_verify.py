"""Verifier for lesson 05: blocking I/O in a thread pool, and what a timeout does not stop.

05.1  in `python pool_io.py`, result(timeout=0.2) raises TimeoutError on the running future, the
      script catches it, and cancel() on that running future returns False
05.2  once stop is set, the running read_sync begins at most one more slice and returns
      cancelled=True, and the pool shuts down with no thread left before "pool closed" is printed
05.3  export_batches(range(8)) returns 8 results; at most 4 futures are ever outstanding and at
      most 2 reads run at once (counted by an instrumented pool and read function)
05.4  async_thread.demo(): asyncio.timeout(0.2) expires around to_thread, the stop event is set,
      read_sync begins at most one more slice and returns, and the thread count is back to where
      it started
05.5  exercise (the course's): a script of the learner's -- pool_io.py, or another script of theirs that
      submits to a thread pool and cancels -- has a second future: cancel() while it is queued is True
      (it never runs), the running one's is False.  No script with a second future = not attempted

This process is the judge and never imports the learner's code.  05.1/05.2/05.5 run the learner's script
once in a subprocess under lab05_driver.py, which records its pool, futures, stop event and slices in order.
05.2 (read_sync on its own), 05.3 and 05.4 run in a probe (shared/probe.py), where lab05_learner.py loads a
fresh copy of the learner's module, replaces the globals it looks up and answers with what it saw; an
exception the learner's code raised is raised here again once the judge's earlier findings are said.
Every wait in the probe is bounded, and every call into it has a timeout beyond that bound.  Figures
(never part of a verdict): the script's run from the driver's events (05.1, 05.2, 05.5), the reads per
worker thread and the futures outstanding (05.3).

"Stops soon" is counted in slices, never timed: a read_sync that looks at its stop event before
every slice begins at most one more slice after stop.set() (one may start in the instant between
its check and the set), however slowly the machine runs.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from shared import probe_report
from shared.figures import attach, bar, lane, lanes, mark, steps
from shared.i18n import t
from shared.logs import LOG_DIR
from shared.probe import Opaque, Probe, shaped
from shared.tap import Because, Check, once, run

HERE = Path.cwd()


def checks() -> list[Check]:
    return [
        Check("05.1", check_timeout_and_cancel, "python lab05_driver.py pool_io.py"),
        Check("05.2", check_stop_and_close, "probe: pool_io (lab05_learner); pool_io.py's driver run"),
        Check("05.3", check_batches, "probe: batch_io, its pool and read_sync replaced (lab05_learner)"),
        Check("05.4", check_to_thread_stop, "probe: async_thread, Event and read_sync replaced (lab05_learner)"),
        Check("05.5", check_queued_cancel, "pool_io.py's driver run, or the learner's other pool script's"),
    ]

# ---------------------------------------------------------------- the pool_io.py run

RUN_BOUND = 30.0  # the script takes about half a second; a hung one is stopped after this


class PoolRun:
    """One run of `python SCRIPT` under the driver; pool_io.py's is shared by 05.1, 05.2 and 05.5."""

    def __init__(self, name: str = "pool_io.py"):
        assert (HERE / name).exists(), t("{name} is missing (step 1)", name=name)
        self.name = name
        started = time.monotonic()
        ran = probe_report.run(["lab05_driver.py", name], LOG_DIR, Path(name).stem, RUN_BOUND, HERE, limit=None)
        assert ran.code is not None, t("python {name} did not finish within {run_bound:g} s (stopped): leaving the "
                                       "with block waits for a call that never stops", name=name, run_bound=RUN_BOUND)
        self.seconds = time.monotonic() - started
        self.returncode = ran.code
        self.output = ran.output
        record = ran.report
        assert record is not None, t("the driver wrote no record; output:\n{stdout}", stdout=ran.output[-600:])
        self.events = record["events"]
        self.outcome = record["outcome"]
        self.threads_left = record["threads_left"]
        self.lines = [e["text"] for e in self.events if e["ev"] == "print"]

    def of(self, kind: str, **match) -> list[dict]:
        """Events of one kind, in the order they happened; each keeps its position as "i"."""
        return [dict(e, i=i) for i, e in enumerate(self.events)
                if e["ev"] == kind and all(e.get(k) == v for k, v in match.items())]

    def crash_tail(self) -> str:
        # Leave out the driver's and runpy's frames: the learner's lines are what matter.
        lines = [line for line in self.output.strip().splitlines()
                 if "lab05_driver.py" not in line and "runpy.py" not in line]
        return "\n".join(lines[-4:])


@once
def pool_run() -> PoolRun:
    """pool_io.py's run under the driver, shared by 05.1, 05.2 and 05.5."""
    return PoolRun()


def pool_timeline(run: PoolRun) -> dict:
    """The script's run as recorded by the driver: the main thread's submits, waits, cancels and stop; each
    worker thread's jobs with the slices they waited through; each job's time in the pool's queue."""
    events = [e for e in run.events if "at" in e]
    main_bars, main_marks, lines = [], [], []
    queue_bars, queue_marks = [], []
    submitted, started, ended, slices = {}, {}, {}, []  # started: job -> (at, its worker thread)
    for e in events:
        ev, at, job = e["ev"], e["at"], e.get("f")
        if ev == "submit":
            submitted[job] = at
            main_marks.append(mark(at, f"submit #{job}", "queued"))
        elif ev == "start":
            started[job] = (at, e.get("thread", "?"))
            if job in submitted:
                queue_bars.append(bar(submitted[job], at, f"#{job}", "queued"))
        elif ev == "end" and job in started:
            ended[job] = at
        elif ev == "slice" and job in started:
            said = t("slice after stop") if e["after_stop"] else t("slice")
            slices.append((started[job][1], mark(at, said, "sleep")))
        elif ev == "result":
            main_bars.append(bar(e.get("began", at), at, f"result(timeout={e['timeout']})", "wait"))
            if e.get("error") == "TimeoutError":
                lines.append(mark(at, f"result(timeout={e['timeout']}) -> TimeoutError", "deadline"))
        elif ev == "cancel":
            main_marks.append(mark(at, f"cancel() #{job} ({e['before']}) -> {e['value']}", "cancel"))
            if e["before"] == "pending" and e["value"] is True and job in submitted:
                queue_bars.append(bar(submitted[job], at, f"#{job}", "queued"))
                queue_marks.append(mark(at, f"#{job} cancelled", "cancel"))
        elif ev == "set":
            main_marks.append(mark(at, "stop.set()", "event"))
        elif ev == "shutdown":
            main_marks.append(mark(at, "shutdown", "event"))
        elif ev == "print" and e["text"] == "pool closed":
            main_marks.append(mark(at, "pool closed", "ok"))
    workers: dict[str, dict] = {}
    for job, (at, thread) in started.items():  # a job that never ended (the script crashed): open to the last event
        found = workers.setdefault(thread, {"bars": [], "marks": []})
        found["bars"].append(bar(at, ended.get(job, max(e["at"] for e in events)), f"job #{job}", "run"))
    for thread, slice_mark in slices:
        workers[thread]["marks"].append(slice_mark)
    rows = [lane(t("main thread"), bars=main_bars, marks=main_marks),
            lane(t("pool queue"), bars=queue_bars, marks=queue_marks)]
    rows += [lane(name, bars=found["bars"][:200], marks=found["marks"][:400]) for name, found in workers.items()]
    return lanes(t("python {name}: wait timeout, cancel, stop, close", name=run.name),
                 rows[:20], lines=lines[:5], caption=t("bars on a worker thread: a job running; small marks: each "
                                                       "slice it began; line: result(timeout=...) giving up"))


def timed_out_wait(run: PoolRun) -> dict | None:
    """The first result() call that gave up with TimeoutError while its future was running."""
    hits = [e for e in run.of("result", error="TimeoutError") if e.get("before") == "running"]
    return hits[0] if hits else None


def module_file(name: str) -> None:
    """The learner's module NAME must be there before a probe is asked to load it."""
    assert (HERE / f"{name}.py").exists(), t("{name}.py is missing", name=name)


CALL_BOUND = 30.0  # the probe's waits for read_sync (whose whole loop takes 2 s) end after this, whatever it does
SHUTDOWN_BOUND = 10.0  # 05.4: the probe's wait for the default executor to shut down
QUICK = 20.0  # a probe call that only loads, reads or raises again
learner = Probe()


def raise_learner_error(number) -> None:
    """What the learner's code raised in the probe's run `number`, raised here (rebuilt by the probe)."""
    if number is not None:
        learner.call("lab05_learner:reraise", number, timeout=QUICK)


# ---------------------------------------------------------------- 05.1

def check_timeout_and_cancel(c) -> None:
    run = pool_run()
    attach(c, lambda: pool_timeline(run))
    c.note(t("python pool_io.py -> exit {returncode} in {seconds:.2f}s: {lines}", returncode=run.returncode,
             seconds=run.seconds, lines=run.lines[:4]))
    assert run.of("submit") or run.outcome == "ok", t("pool_io.py failed before it submitted anything:\n{crash_tail}",
                                                      crash_tail=run.crash_tail())
    assert run.of("submit"), t("pool_io.py submitted nothing to a ThreadPoolExecutor")
    waited = timed_out_wait(run)
    if waited is None:
        answered = run.of("result")
        first = answered[0] if answered else None
        if first and "value" in first:
            raise AssertionError(t("result(timeout={timeout}) waited {waited}s and got the full result instead of "
                                   "timing out: wait only 0.2 s", timeout=first['timeout'], waited=first['waited']))
        raise AssertionError(t("no result(timeout=...) on the running future raised TimeoutError; result calls seen: "
                               "{answered}", answered=answered))
    c.note(t("result(timeout={timeout}) raised TimeoutError after {waited}s while the future ran",
             timeout=waited['timeout'], waited=waited['waited']))
    assert waited["timeout"] is not None and waited["timeout"] <= 1.0, t(
        "the wait should be bounded at about 0.2 s, got timeout={timeout}", timeout=waited['timeout'])
    later = [e for e in run.of("cancel", f=waited["f"]) if e["i"] > waited["i"]]
    c.note("cancel(): " + (", ".join(f"{e['before']} -> {e['value']}" for e in later) or t("never called")))
    if not later:
        crashed = run.outcome != "ok" and not run.of("print")
        raise AssertionError(t("cancel() was never called on this future after the timeout (cancelled() only asks, "
                               "it requests nothing).")
                             + (t(" The script crashed:\n{tail}", tail=run.crash_tail()) if crashed else ""))
    first = later[0]
    assert first["before"] == "running", t("cancel() was called when the future was already {before}: call it right "
                                           "after the wait times out, while the job still runs, to see that a "
                                           "running job cannot be cancelled", before=first['before'])
    assert first["value"] is False, t("cancel() on a running future should return False, got {value}",
                                      value=first['value'])
    assert "wait timed out; cancel: False" in run.lines, t(
        "the script did not print wait timed out; cancel: False; it printed: {lines}", lines=run.lines[:4])


# ---------------------------------------------------------------- 05.2

def check_stop_and_close(c) -> None:
    # The function on its own: stop is set once it is inside its loop (its first slice has begun).
    module_file("pool_io")
    seen = learner.ask("lab05_learner:stop_read", timeout=2 * CALL_BOUND + QUICK,
                       keys=("returned", "began", "after", "value", "raised"))
    assert seen["returned"] is True, t("read_sync had not returned {call_bound:g} s after stop was set",
                                       call_bound=CALL_BOUND)
    raise_learner_error(seen["raised"])
    began, value = seen["began"], seen["value"]
    assert began, t("read_sync returned {value!r} without waiting through a single slice (time.sleep or stop.wait "
                    "with a timeout): it should wait in slices and check stop between them", value=value)
    after = seen["after"]
    c.note(t("read_sync(3, stop): stop set once slice {began} had begun; {after} more slice(s) began after it; "
             "returned {value}", began=began, after=after, value=value))
    assert after <= 1, t("read_sync began {after} more slices after stop was set: check stop.is_set() before every "
                         "slice", after=after)
    assert value == {"id": 3, "cancelled": True}, t("a stopped read should return {{'id': 3, 'cancelled': True}}, "
                                                    "got {value!r}", value=value)

    # The learner's script: stop.set() in the timeout branch, then the pool closes.
    run = pool_run()
    attach(c, lambda: pool_timeline(run))
    waited = timed_out_wait(run)
    n = waited["f"] if waited else 1
    sets = run.of("set")
    ends = run.of("end", f=n)
    c.note(t("python pool_io.py -> exit {returncode}: {lines}; threads left {threads_left}", returncode=run.returncode,
             lines=run.lines[-3:], threads_left=run.threads_left))
    assert sets, t("the script never called stop.set(): the running read_sync will not stop by itself")
    assert ends, t("job {n} never finished:\n{crash_tail}", n=n, crash_tail=run.crash_tail())
    after = len(run.of("slice", f=n, after_stop=True))
    c.note(t("after stop.set() the worker began {after} more slice(s) and returned {value}", after=after,
             value=ends[0].get('value')))
    assert after <= 1, t("the running job began {after} more slices after stop.set(): it should leave before the "
                         "next slice", after=after)
    assert "'cancelled': True" in ends[0].get("value", ""), t(
        "the stopped job should return cancelled=True, got {value}", value=ends[0].get('value', ends[0].get('error')))
    assert run.outcome == "ok" and run.returncode == 0, t("the script failed ({outcome}):\n{crash_tail}",
                                                          outcome=run.outcome, crash_tail=run.crash_tail())
    assert any(line.startswith("worker result:") and "'cancelled': True" in line for line in run.lines), t(
        "expected a worker result: line with cancelled True, got: {lines}", lines=run.lines)
    assert run.lines and run.lines[-1] == "pool closed", t(
        "the last line should be pool closed, got: {lines}", lines=run.lines)
    closed = [e for e in run.of("print") if e["text"] == "pool closed"][-1]
    if not any(e["i"] < closed["i"] for e in run.of("shutdown")):
        raise Because(t("the pool was never shut down before pool closed was printed (no with block ended, no "
                        "shutdown() call): its worker thread was still alive ({threads_left})",
                        threads_left=", ".join(run.threads_left) or t("none left at exit")),
                      t("Create the pool with `with ThreadPoolExecutor(max_workers=1) as pool:` and print pool closed "
                        "after the block (leaving it calls shutdown(wait=True)), or call pool.shutdown() before that "
                        "print; a pool left open keeps its worker thread until the interpreter exits."))
    assert not run.threads_left, t("threads were still alive when the script ended: {threads_left}",
                                   threads_left=run.threads_left)


# ---------------------------------------------------------------- 05.3

def batch_figures(reads: list, outstanding: list) -> list[dict]:
    """Lanes per worker thread (a bar per read), and the futures outstanding against the limit of 4, from
    the probe's record: reads as [thread, product, start, end], outstanding as [at, count]."""
    last = max([r[3] for r in reads if r[3] is not None] + [r[2] for r in reads])
    threads: dict[str, list] = {}
    for name, product, start, end in reads:
        threads.setdefault(name, []).append(bar(start, last if end is None else end, f"read {product}", "pool"))
    rows = [lane(name, bars=bars) for name, bars in threads.items()]
    figure = lanes(t("the pool's worker threads: 4 futures a batch, at most 2 reads at once"), rows[:20],
                   caption=t("each bar: one read_sync running in a worker thread"))
    return [figure, steps(t("futures outstanding"), [(at, n) for at, n in outstanding], limit=4, label="futures")]


def size(value) -> int:
    """len(value) for what came back from the probe: a value that was not plain data (Opaque) has none,
    said with the learner's type name, as len() would have said it."""
    if isinstance(value, Opaque):
        raise TypeError(f"object of type '{value.type_name}' has no len()")
    return len(value)


def check_batches(c) -> None:
    module_file("batch_io")
    seen = learner.ask("lab05_learner:batches", timeout=CALL_BOUND + QUICK, keys=("has",))
    assert seen["has"], t("batch_io.py lacks export_batches")
    shaped("batches", seen, ("returned", "results", "seconds", "submitted", "max_outstanding", "max_running", "workers",
                             "reads", "outstanding", "raised"))
    attach(c, lambda: batch_figures(seen["reads"], seen["outstanding"]))
    assert seen["returned"] is True, t("did not return within {call_bound:g} s", call_bound=CALL_BOUND)
    raise_learner_error(seen["raised"])
    results, seconds = seen["results"], seen["seconds"]
    submitted, max_outstanding, max_running = seen["submitted"], seen["max_outstanding"], seen["max_running"]
    ids = sorted(r.get("id") for r in results) if isinstance(results, list) and all(
        isinstance(r, dict) for r in results) else results
    count = size(results)
    c.note(t("export_batches(0..7): {count} results in {seconds:.2f}s; {submitted} submits, at most "
             "{max_outstanding} futures outstanding, at most {max_running} running, pool max_workers={workers}",
             count=count, seconds=seconds, submitted=submitted, max_outstanding=max_outstanding,
             max_running=max_running, workers=seen['workers']))
    assert submitted >= 8, t("read_sync should be submitted 8 times through ThreadPoolExecutor.submit, got "
                             "{submitted}", submitted=submitted)
    assert ids == list(range(8)), t("expected one result for each id 0..7, got {ids}", ids=ids)
    assert max_outstanding <= 4, t("{max_outstanding} futures were outstanding at once: submit at most 4, and drain "
                                   "them before the next batch", max_outstanding=max_outstanding)
    assert max_running <= 2, t("{max_running} reads ran at once: the pool should have max_workers=2",
                               max_running=max_running)


# ---------------------------------------------------------------- 05.4

def check_to_thread_stop(c) -> None:
    module_file("async_thread")
    # The probe runs demo() on a loop of its own, then gives read_sync CALL_BOUND to return by itself
    # before the executor shuts down (SHUTDOWN_BOUND): the thread must finish because the function
    # returned, not because the pool was shut down.
    seen = learner.ask("lab05_learner:to_thread", timeout=CALL_BOUND + SHUTDOWN_BOUND + QUICK, keys=("has",))
    assert seen["has"], t("async_thread.py lacks demo()")
    shaped("to_thread", seen, ("escaped", "raised", "returned", "seconds", "lines", "calls", "on_loop_thread", "ended",
                               "at_stop", "after", "run"))
    if seen["escaped"]:
        raise AssertionError(t("demo() let the TimeoutError escape: catch the asyncio.timeout expiry with except "
                               "TimeoutError and call stop.set() there"))
    raise_learner_error(seen["raised"])
    returned, lines, at_stop = seen["returned"], seen["lines"], seen["at_stop"]
    c.note(t("demo() returned {returned!r} after {seconds:.2f}s and printed {lines}", returned=returned, lines=lines,
             seconds=seen['seconds']))
    assert seen["calls"], t("demo() never called read_sync")
    if seen["on_loop_thread"]:
        raise Because(t("a blocking call in the event loop: read_sync (its time.sleep) ran on the loop's own thread "
                        "for {seconds:.2f}s, so asyncio.timeout(0.2) could not fire until it returned",
                        seconds=seen["seconds"]),
                      t("Inside async def, a blocking call (time.sleep, a synchronous SDK call) holds the whole event "
                        "loop: write return await asyncio.to_thread(read_sync, 1, stop), so it runs in a worker "
                        "thread and the loop stays free for the timeout."))
    assert returned is None, t("demo() returned {returned!r}: the 0.2 s timeout should win (the timeout branch "
                               "returns None), not the full result", returned=returned)
    assert at_stop is not None, t("stop.set() was never called after the timeout: cancelling the await does not end "
                                  "the thread, so read_sync reads on for the full 2 s")
    assert seen["ended"], t("read_sync had not returned {call_bound:g} s after stop", call_bound=CALL_BOUND)
    after = seen["after"]
    c.note(t("read_sync had begun {at_stop} slice(s) when stop.set() came, and {after} more before it returned",
             at_stop=at_stop, after=after))
    assert after <= 1, t("read_sync in the thread began {after} more slices after stop.set(): it should leave before "
                         "the next one", after=after)
    gone = learner.ask("lab05_learner:to_thread_exit", seen["run"], timeout=CALL_BOUND + QUICK,
                       keys=("exited", "threads", "baseline"))
    threads, baseline = gone["threads"], gone["baseline"]
    if gone["exited"] is not True:
        raise AssertionError(t("after the executor shut down there are {threads} threads, {baseline} at the start: "
                               "the worker thread did not exit", threads=threads, baseline=baseline))
    c.note(t("thread count back to {threads} (it was {baseline})", threads=threads, baseline=baseline))


# ---------------------------------------------------------------- 05.5

def exercise_scripts() -> list[str]:
    """The learner's other scripts that may hold the exercise: they submit to a pool and cancel a future."""
    found = []
    for path in sorted(HERE.glob("*.py")):
        if path.name == "pool_io.py" or re.match(r"lab\d\d_", path.name):
            continue  # pool_io.py is looked at first; labNN_*.py are the kit's
        source = path.read_text(encoding="utf-8", errors="replace")
        if "ThreadPoolExecutor" in source and ".submit(" in source and ".cancel(" in source:
            found.append(path.name)
    return found


def check_queued_cancel(c) -> None:
    run = pool_run()
    tried = ["pool_io.py"]
    for name in exercise_scripts():
        if len(run.of("submit")) >= 2:
            break
        run = PoolRun(name)
        tried.append(name)
    submits = run.of("submit")
    if len(submits) >= 2:
        attach(c, lambda: pool_timeline(run))
    if len(submits) < 2:
        c.skip(t("only one future submitted ({tried}): exercise not attempted (with max_workers=1 submit the long "
                 "job, then a second one right away, and cancel() it while it waits)", tried=t(', ').join(tried)))
    cancels = run.of("cancel")
    c.note(t("python {name}: {n_submits} submits (max_workers={workers}); cancel(): ", name=run.name,
             n_submits=len(submits), workers=submits[0].get('workers'))
           + ", ".join(f"#{e['f']} {e['before']} -> {e['value']}" for e in cancels))
    queued = [e for e in cancels if e["before"] == "pending" and e["value"] is True]
    assert queued, t("no queued future was cancelled: with max_workers=1 submit the long job, then the second one "
                     "right away, and cancel it while it still waits (once it runs it cannot be cancelled)")
    withdrawn = queued[0]["f"]
    assert not run.of("start", f=withdrawn), t("the cancelled job #{withdrawn} ran anyway", withdrawn=withdrawn)
    misread = [e for e in run.of("result", f=withdrawn) if e.get("error") == "CancelledError"]
    assert not misread, t("result() was called on the cancelled future and raised CancelledError: it has no result "
                          "to read")
    running = [e for e in cancels if e["before"] == "running"]
    assert running, t("cancel() was never called on the running future: the exercise compares both (the running "
                      "one's is False)")
    assert all(e["value"] is False for e in running), t("cancel() on a running future should be False: {running}",
                                                        running=running)


if __name__ == "__main__":
    run(checks())
