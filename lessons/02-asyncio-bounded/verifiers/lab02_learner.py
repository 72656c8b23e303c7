"""Runs in a child process (a "probe") next to the learner's bounded_async.py: lesson 02's scenarios for
checks 02.1–02.5, one per run:  python lab02_learner.py KIND   (normal, timeout or error; cwd: the work folder)

It runs bounded_async.main() once -- normal, with a SHORT_BUDGET budget, or with a ValueError on item 3 (only
the budget run has a deadline; the learner's own budget is recorded, not used, so no machine is too slow for
the others) -- and writes one JSON report (shared/probe_report.py) of what it saw; the judge decides.  A module
of its own: the child never loads the judge, which imports only SHORT_BUDGET from here.

Only what the learner's code looks up at call time is wrapped:

  - bounded_async.read_product     -> counts reads running at once, injects the error
  - bounded_async.collect_products -> records whether it returned rows or raised
  - asyncio.Queue                  -> maxsize, the largest qsize, which tasks call get(); a task back at
                                      get() after it was asked to cancel swallowed its CancelledError (the
                                      batch would never end): noted, and the task ended
  - bounded_async.asyncio          -> a view of asyncio whose timeout() uses 0.15 s or no deadline at all
  - the event loop                 -> a stall (main() runs, yet no task can run and no timer is pending)
                                      is noted and ends the run; each turn samples the module's numbers
  - time.sleep                     -> a call on the event loop's thread while it runs is noted

So a hang or a blocked loop is a recorded fact, not a wait that ran out (a read that returns before the loop
ran a callback scheduled when it began never let another task run); the judge still kills the child after a
generous bound.  The exercise (02.5) names no variables, so at every loop turn the module's own integers
(see numbers_of) are sampled next to the reads really running and the most seen so far: one that equals the
first at every turn is the running count, the second the peak.  When each read ran, in which task, how each
task ended and when the budget was due are for the figures of 02.2–02.4 only, never judged.
"""

from __future__ import annotations

import sys

SHORT_BUDGET = 0.15  # the timeout scenario's budget, in seconds


def numbers_of(module) -> dict[str, int]:
    """The module's own integers, wherever a read_product could keep a count: module-level names, int
    values of module-level dicts, int attributes of the module's functions, classes and namespaces."""
    import types

    def plain(value):
        return isinstance(value, int) and not isinstance(value, bool)

    found = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if plain(value):
            found[name] = value
        elif isinstance(value, dict):
            found.update({f"{name}[{key!r}]": item for key, item in list(value.items())[:50] if plain(item)})
        elif isinstance(value, (types.FunctionType, type, types.SimpleNamespace)) \
                and getattr(value, "__module__", module.__name__) == module.__name__:
            found.update({f"{name}.{attr}": item for attr, item in list(vars(value).items())
                          if not attr.startswith("__") and plain(item)})
    return found


def follow(samples: list, final: dict) -> dict:
    """For each number that changed during the run: does it follow the reads running, or their peak?
    samples: [running, peak so far, {label: value}] at each loop turn; final: the numbers after main()."""
    every = samples + [[0, samples[-1][1] if samples else 0, final]]
    labels = sorted({label for _, _, numbers in every for label in numbers
                     if len({n.get(label) for _, _, n in every}) > 1})
    report = {}
    for label in labels:
        off_running = next(([r, n.get(label)] for r, _, n in every if n.get(label) != r), None)
        off_peak = next(([p, n.get(label)] for _, p, n in every if n.get(label) != p), None)
        report[label] = {"running": off_running is None, "peak": off_peak is None, "final": final.get(label),
                         "off_running": off_running, "off_peak": off_peak}
    return report


def run_probe(kind: str) -> dict:
    """One scenario of bounded_async.main(), instrumented as said above: the report, as plain data."""
    import asyncio
    import contextlib
    import io
    import time
    import traceback

    from shared.learner_spies import LoopTurn, ModuleView, watch_loop_sleeps

    report: dict = {"kind": kind}
    buffer = io.StringIO()
    sleeps: list[str] = []

    def blocking_sleep(place, function, seconds):
        # A blocking sleep on the loop's own thread while the loop runs: nothing else can run meanwhile.
        place = f"{place} {function}(): time.sleep({seconds})"
        if place not in sleeps:
            sleeps.append(place)

    watch_loop_sleeps(blocking_sleep)  # before the import, so `from time import sleep` gets it too
    try:
        with contextlib.redirect_stdout(buffer):
            import bounded_async as module
    except BaseException:
        report["error"] = "import bounded_async failed:\n" + traceback.format_exc(limit=4)
        return report

    state = {"active": 0, "peak": 0, "reads": [], "max_alive": 0, "queues": [], "getters": set(),
             "blocking_reads": 0}
    # For the figures only (never judged): each read's time span, each task's end, the running count.
    timeline: dict = {"reads": [], "tasks": [], "ends": [], "running": [], "consumers": [], "deadline": None}
    task_numbers: dict = {}

    def task_number(task) -> int:
        """The task's place in order of first appearance; its end (and how) is noted when it is done."""
        if task not in task_numbers:
            task_numbers[task] = len(task_numbers)
            timeline["tasks"].append(task.get_name() if task is not None else "?")
            if task is not None:
                def ended(done, number=task_numbers[task]):
                    how = "cancelled" if done.cancelled() else "error" if done.exception() is not None else "done"
                    timeline["ends"].append([number, time.monotonic(), how])
                task.add_done_callback(ended)
        return task_numbers[task]
    root_holder: list = []
    samples: list = []

    class Swallowed(BaseException):
        """Ends a consumer that swallowed its cancellation (a BaseException: `except Exception` passes it on)."""

    class SpyQueue(asyncio.Queue):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.largest = 0
            state["queues"].append(self)

        def put_nowait(self, item):  # put() ends here once there is room
            super().put_nowait(item)
            self.largest = max(self.largest, self.qsize())

        async def get(self):
            task = asyncio.current_task()
            state["getters"].add(task)
            if len(task_numbers) < 40 and task_number(task) not in timeline["consumers"]:
                timeline["consumers"].append(task_number(task))
            if task is not None and task.cancelling():
                # Asked to cancel, yet back for more work: the CancelledError was swallowed, and
                # nothing would ever stop this consumer.  Note it, and end the task so the run ends.
                report.setdefault("swallowed", []).append(task.get_name())
                raise Swallowed()
            return await super().get()

    real_read = module.read_product
    real_collect = module.collect_products

    async def spy_read(product_id, *args, **kwargs):
        state["reads"].append(product_id)
        alive = [t for t in asyncio.all_tasks() if t not in root_holder]
        state["max_alive"] = max(state["max_alive"], len(alive))
        me = task_number(asyncio.current_task()) if len(timeline["reads"]) < 400 else None
        read = {"task": me, "id": _plain_id(product_id), "start": time.monotonic(), "end": None, "outcome": None}
        if me is not None:
            timeline["reads"].append(read)
        if kind == "error" and product_id == 3:
            read["end"], read["outcome"] = read["start"], "injected"
            raise ValueError("invalid product for drill")
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        read["start"] = time.monotonic()
        if len(timeline["running"]) < 1000:
            timeline["running"].append([read["start"], state["active"]])
        turn = LoopTurn()  # not turned when the read is over: no other task ran while it did
        try:
            value = await real_read(product_id, *args, **kwargs)
            read["outcome"] = "ok"
            return value
        except asyncio.CancelledError:
            read["outcome"] = "cancelled"
            raise
        except BaseException:
            read["outcome"] = "error"
            raise
        finally:
            read["end"] = time.monotonic()
            state["active"] -= 1
            if len(timeline["running"]) < 1000:
                timeline["running"].append([read["end"], state["active"]])
            if not turn.turned:
                state["blocking_reads"] += 1
            turn.cancel()

    async def spy_collect(*args, **kwargs):
        try:
            rows = await real_collect(*args, **kwargs)
        except BaseException as exc:
            report["collect"] = describe(exc)
            raise
        ids = []
        for i in range(20):
            try:
                ids.append(rows[i]["id"])
            except Exception as exc:  # a missing key is evidence, not a crash
                ids.append(f"<{type(exc).__name__}>")
        report["collect"] = {"returned": True, "len": len(rows), "ids": ids, "type": type(rows).__name__}
        return rows

    def timeout(delay):
        # Only the timeout run has a deadline, a short one.  The others run without: a slow machine
        # can never make a normal batch time out, and a stall shows as a loop with nothing to wait for.
        report["budget_requested"] = delay
        budget = asyncio.timeout(SHORT_BUDGET if kind == "timeout" else None)
        budgets.append(budget)
        return budget

    budgets: list = []
    asyncio.Queue = SpyQueue
    module.read_product = spy_read
    module.collect_products = spy_collect
    report["asyncio_view"] = getattr(module, "asyncio", None) is asyncio
    if report["asyncio_view"]:
        module.asyncio = ModuleView(asyncio, timeout=timeout)  # everything else is the real asyncio

    async def drive():
        root_holder.append(asyncio.current_task())
        samples.append([0, 0, numbers_of(module)])  # before any read: nothing runs, nothing seen yet
        started = time.monotonic()
        try:
            await module.main()
            report["main"] = {"returned": True}
        except BaseException as exc:  # the error scenario expects an ExceptionGroup here
            report["main"] = describe(exc)
        report["seconds"] = round(time.monotonic() - started, 3)
        leftovers = [t for t in asyncio.all_tasks() if t not in root_holder]
        report["leftover_tasks"] = [repr(t)[:120] for t in leftovers]
        report["consumers_done"] = all(t.done() for t in state["getters"])

    def waiting_places() -> list[str]:
        """Where each unfinished task of the learner's module waits: function, line and source."""
        import linecache
        places = []
        for task in asyncio.all_tasks():
            frames = [f for f in task.get_stack() if f.f_code.co_filename.endswith("bounded_async.py")]
            if frames and task not in root_holder:
                frame = frames[-1]
                source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                places.append(f"{frame.f_code.co_name} at line {frame.f_lineno}: {source}")
        return sorted(set(places))

    class WatchedLoop(asyncio.SelectorEventLoop):
        """Notices a stall: main() still runs, yet nothing is ready to run and no timer is pending.
        Only I/O could wake such a loop and the batch does none: every task waits for another, forever."""

        def _run_once(self):
            try:
                idle = not self._ready and self._default_executor is None \
                    and all(handle.cancelled() for handle in self._scheduled)
            except AttributeError:  # not CPython's loop: no stall detection, the bound still applies
                idle = False
            if idle and "stalled" not in report and root_holder and not root_holder[0].done():
                report["stalled"] = waiting_places()
                root_holder[0].cancel()  # ends the run: main() gets CancelledError, the rest is cleaned up
            if root_holder and not root_holder[0].done() and state["reads"]:
                sample = [state["active"], state["peak"], numbers_of(module)]
                if not samples or samples[-1] != sample:
                    samples.append(sample)
            super()._run_once()

    try:
        with contextlib.redirect_stdout(buffer), asyncio.Runner(loop_factory=WatchedLoop) as runner:
            runner.run(drive())
    except BaseException:
        report["error"] = traceback.format_exc(limit=6)
    report["lines"] = [line.strip() for line in buffer.getvalue().splitlines() if line.strip()]
    report.update(peak=state["peak"], reads=len(state["reads"]), max_alive=state["max_alive"],
                  consumers=len(state["getters"]),
                  queues=[{"maxsize": q.maxsize, "largest": q.largest} for q in state["queues"]],
                  blocking={"reads": state["blocking_reads"], "sleeps": sleeps[:3]},
                  numbers=follow(samples, numbers_of(module)))
    try:  # the loop time (time.monotonic) at which the budget was due
        timeline["deadline"] = next((b.when() for b in budgets if b.when() is not None), None)
    except Exception:  # noqa: BLE001 - only a figure needs it
        pass
    report["timeline"] = timeline
    return report


def _plain_id(value):
    return value if isinstance(value, (int, str)) else repr(value)[:20]


def describe(exc: BaseException) -> dict:
    group = isinstance(exc, BaseExceptionGroup)
    has_value_error = exc.subgroup(ValueError) is not None if group else isinstance(exc, ValueError)
    return {"returned": False, "type": type(exc).__name__, "group": group,
            "value_error": has_value_error, "text": repr(exc)[:300]}


if __name__ == "__main__":
    from shared import probe_report
    probe_report.write(run_probe(sys.argv[1]), default=str)
