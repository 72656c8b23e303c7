"""Verifier for lesson 02: prove checks 02.1–02.10.

02.1–02.5 run the learner's bounded_async.main() in a child process ("probe"), one
per scenario: normal, a 0.15 s budget, and a ValueError on item 3 (only the budget run has a
deadline; the learner's own budget is recorded, not used, so no machine is too slow for the others).
Inside the child the verifier only wraps things the learner's code looks up at call time:

  - bounded_async.read_product     -> counts reads running at once, injects the error
  - bounded_async.collect_products -> records whether it returned rows or raised
  - asyncio.Queue                  -> records maxsize, the largest qsize and which tasks call get();
                                      a task that calls get() again after it was asked to cancel
                                      has swallowed its CancelledError -- the batch would never end --
                                      so that get() notes the fact and ends the task instead
  - bounded_async.asyncio          -> a view of asyncio whose timeout() uses 0.15 s (timeout scenario)
                                      or no deadline at all (the others)
  - the event loop                 -> notices a stall: main() still runs, yet no task can run and no
                                      timer is pending, so every task waits for another forever

So a hang is a recorded fact, not a wait that ran out; the child is still killed by its PID
after a generous bound, for any other way of never ending.

02.6–02.10 run the asyncio note's demo and experiment scripts and read their lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PROBE_MARK = "@@probe "
PROBE_TIMEOUT = 30.0  # a normal batch takes about 1 s; a batch that never ends is killed after this
SCRIPT_TIMEOUT = 30.0  # the note's scripts take about half a second
SHORT_BUDGET = 0.15

# Names the exercise counters may have (the guide asks for in_flight and peak).
COUNTER_NAMES = ("in_flight", "inflight", "in_flight_reads", "active_reads", "running_reads", "current_reads")
PEAK_NAMES = ("peak", "peak_in_flight", "max_in_flight", "peak_reads", "max_seen", "max_concurrent")


def exercise_names(module) -> tuple[str | None, str | None]:
    def first(names):
        for name in names:
            if isinstance(getattr(module, name, None), int) and not isinstance(getattr(module, name), bool):
                return name
        return None
    return first(COUNTER_NAMES), first(PEAK_NAMES)


# --------------------------------------------------------------------------- probe (child process)

def run_probe(kind: str) -> dict:
    import asyncio
    import contextlib
    import io
    import time
    import traceback

    report: dict = {"kind": kind}
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            import bounded_async as module
    except BaseException:
        report["error"] = "import bounded_async failed:\n" + traceback.format_exc(limit=4)
        return report

    state = {"active": 0, "peak": 0, "reads": [], "max_alive": 0, "queues": [], "getters": set()}
    root_holder: list = []

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
        if kind == "error" and product_id == 3:
            raise ValueError("invalid product for drill")
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        try:
            return await real_read(product_id, *args, **kwargs)
        finally:
            state["active"] -= 1

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

    class AsyncioView:
        """Stands in for bounded_async.asyncio: everything is the real asyncio except timeout()."""

        def __getattr__(self, name):
            return getattr(asyncio, name)

        def timeout(self, delay):
            # Only the timeout run has a deadline, a short one.  The others run without: a slow machine
            # can never make a normal batch time out, and a stall shows as a loop with nothing to wait for.
            report["budget_requested"] = delay
            return asyncio.timeout(SHORT_BUDGET if kind == "timeout" else None)

    counter, peak = exercise_names(module)
    for name in (counter, peak):
        if name:
            setattr(module, name, 0)

    asyncio.Queue = SpyQueue
    module.read_product = spy_read
    module.collect_products = spy_collect
    report["asyncio_view"] = getattr(module, "asyncio", None) is asyncio
    if report["asyncio_view"]:
        module.asyncio = AsyncioView()

    async def drive():
        root_holder.append(asyncio.current_task())
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
            super()._run_once()

    try:
        with contextlib.redirect_stdout(buffer), asyncio.Runner(loop_factory=WatchedLoop) as runner:
            runner.run(drive())
    except BaseException:
        report["error"] = traceback.format_exc(limit=6)
    report["lines"] = [line.strip() for line in buffer.getvalue().splitlines() if line.strip()]
    report["peak"] = state["peak"]
    report["reads"] = len(state["reads"])
    report["max_alive"] = state["max_alive"]
    report["consumers"] = len(state["getters"])
    report["queues"] = [{"maxsize": q.maxsize, "largest": q.largest} for q in state["queues"]]
    report["exercise"] = {"counter": counter, "peak": peak,
                          "counter_value": getattr(module, counter) if counter else None,
                          "peak_value": getattr(module, peak) if peak else None}
    return report


def describe(exc: BaseException) -> dict:
    group = isinstance(exc, BaseExceptionGroup)
    if group:
        has_value_error = exc.subgroup(ValueError) is not None
    else:
        has_value_error = isinstance(exc, ValueError)
    return {"returned": False, "type": type(exc).__name__, "group": group,
            "value_error": has_value_error, "text": repr(exc)[:300]}


# --------------------------------------------------------------------------- checks (parent)

from shared.i18n import t  # noqa: E402
from shared.proc import run_python  # noqa: E402
from shared.tap import Tap  # noqa: E402

HERE = Path.cwd()
_probes: dict[str, dict] = {}


def probe(kind: str) -> dict:
    """Run one scenario in a child process (cached: several checks read the same run)."""
    if kind not in _probes:
        import subprocess
        try:
            done = run_python([Path(__file__).name, "--probe", kind], cwd=HERE, timeout=PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            _probes[kind] = {"hung": True}
        else:
            found = [line for line in done.stdout.splitlines() if line.startswith(PROBE_MARK)]
            if found:
                _probes[kind] = json.loads(found[-1][len(PROBE_MARK):])
            else:
                _probes[kind] = {"error": f"probe exited {done.returncode}:\n{done.stdout[-1500:]}"}
    report = _probes[kind]
    assert not report.get("hung"), t(
        f"{kind} 场景 {PROBE_TIMEOUT:g} 秒内没有结束（正常约 1 秒）：是否有任务一直在忙、从不让出事件循环？",
        f"the {kind} run did not finish within {PROBE_TIMEOUT:g} s (it takes about 1 s): does a task keep busy "
        "without ever giving the event loop back?")
    assert "error" not in report, t("运行 bounded_async 出错：\n", "running bounded_async failed:\n") + report["error"]
    assert not report.get("stalled"), t(
        f"{kind} 场景停住了：main() 还没返回，事件循环里却没有可运行的任务、也没有待触发的计时器——每个任务都在等另一个，"
        f"永远等下去：{'; '.join(report['stalled'])}。是不是少给了某个消费者一个 None 哨兵？",
        f"the {kind} run stalled: main() had not returned, yet nothing on the event loop could run and no timer "
        f"was pending -- every task waited for another, forever: {'; '.join(report['stalled'])}. Is a consumer "
        "missing its None sentinel?")
    assert not report.get("swallowed"), t(
        f"{kind} 场景中，消费者 {report.get('swallowed')} 被要求取消后又回到 queue.get() 取下一项：它吞掉了 "
        "CancelledError，没有什么能让它停下，批次会永远挂起。让 CancelledError 离开消费者（清理放在 finally）。",
        f"in the {kind} run, consumer(s) {report.get('swallowed')} came back to queue.get() for more work after "
        "being asked to cancel: the CancelledError was swallowed, nothing can stop them, and the batch would hang "
        "forever. Let CancelledError leave the consumer (clean up in finally).")
    return report


def count(lines: list[str], text: str) -> int:
    return sum(1 for line in lines if line == text)


def completed_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("completed")]


def assert_everyone_cleaned_up(report: dict) -> None:
    closed = count(report["lines"], "consumer closed")
    assert report["consumers"] > 0, t("没有观察到任何消费者从队列取数", "no consumer was seen taking from the queue")
    assert closed == report["consumers"], t(
        f"{report['consumers']} 个消费者，却打印了 {closed} 次 consumer closed（要放在 finally 里）",
        f"{report['consumers']} consumers but {closed} consumer closed lines (print it in finally)")
    assert report["consumers_done"] and not report["leftover_tasks"], t(
        f"main() 结束后仍有未结束的任务：{report['leftover_tasks']}",
        f"tasks still pending after main() ended: {report['leftover_tasks']}")


def check_normal_batch(tap: Tap) -> None:
    with tap.check("02.1") as c:
        c.skip_unless_selected()
        report = probe("normal")
        lines = report["lines"]
        c.note(f"output: {lines}")
        main = report.get("main", {})
        assert main.get("returned"), t(f"正常批次 main() 抛出了 {main.get('text')}",
                                       f"main() raised on the normal batch: {main.get('text')}")
        collect = report.get("collect", {})
        assert collect.get("returned"), t("collect_products 没有返回结果", "collect_products did not return rows")
        c.note(f"collect_products returned a {collect['type']} of {collect['len']} rows; "
               f"rows[i]['id'] for i in 0..19: {collect['ids']}")
        assert collect["len"] == 20 and collect["ids"] == list(range(20)), t(
            "应得到 20 条，且 rows[i]['id'] == i（以 product_id 为键）",
            "expected 20 rows with rows[i]['id'] == i (keyed by product_id)")
        assert "completed 20" in lines, t("main() 没有打印 completed 20", "main() did not print completed 20")
        c.note(f"consumers that took from the queue: {report['consumers']}; "
               f"most tasks alive during a read: {report['max_alive']}")
        assert report["consumers"] == 4, t(f"应正好四个消费者，实际 {report['consumers']}",
                                           f"expected exactly four consumers, got {report['consumers']}")
        assert report["max_alive"] <= 4, t(
            f"读取时同时存在 {report['max_alive']} 个任务：不要为每件商品创建任务",
            f"{report['max_alive']} tasks were alive during a read: do not create a task per product")
        assert count(lines, "consumer closed") == 4, t(
            f"consumer closed 应打印 4 次，实际 {count(lines, 'consumer closed')}",
            f"consumer closed should print 4 times, got {count(lines, 'consumer closed')}")
        assert_everyone_cleaned_up(report)


def check_limits(tap: Tap) -> None:
    with tap.check("02.2") as c:
        c.skip_unless_selected()
        report = probe("normal")
        c.note(f"reads running at once, at most: {report['peak']} (over {report['reads']} reads)")
        c.note(f"queues created: {report['queues']}")
        assert report["peak"] <= 2, t(f"同时读取峰值 {report['peak']} 超过 2：Semaphore(2) 要包住 await read_product",
                                      f"{report['peak']} reads ran at once, over 2: Semaphore(2) must wrap "
                                      "the await of read_product")
        assert report["peak"] == 2, t(f"同时读取峰值只有 {report['peak']}：两张通行证应允许两个读取并行",
                                      f"only {report['peak']} read ran at once: two slots should let two reads overlap")
        assert report["queues"], t("没有观察到 asyncio.Queue", "no asyncio.Queue was created")
        for queue in report["queues"]:
            assert queue["maxsize"] == 4, t(f"队列 maxsize 应为 4，实际 {queue['maxsize']}（0 表示无界）",
                                            f"the queue's maxsize should be 4, got {queue['maxsize']} (0 = unbounded)")
            assert queue["largest"] <= 4, t(f"队列里曾有 {queue['largest']} 项", f"the queue once held {queue['largest']}")


def check_timeout(tap: Tap) -> None:
    with tap.check("02.3") as c:
        c.skip_unless_selected()
        report = probe("timeout")
        lines = report["lines"]
        assert report["asyncio_view"], t(
            "bounded_async 里没有 asyncio 模块名（请用 import asyncio 和 asyncio.timeout）",
            "bounded_async has no module-level asyncio (use import asyncio and asyncio.timeout)")
        assert "budget_requested" in report, t("main() 没有调用 asyncio.timeout(...)",
                                               "main() never called asyncio.timeout(...)")
        c.note(f"main asked for {report['budget_requested']} s; ran with {SHORT_BUDGET} s; "
               f"returned after {report['seconds']} s, {report['reads']} reads started")
        c.note(f"output: {lines}")
        assert "batch timed out" in lines, t("没有打印 batch timed out", "batch timed out was not printed")
        assert not completed_lines(lines), t(
            f"超时后仍打印了 {completed_lines(lines)}：不能把部分结果当完整结果",
            f"after the timeout it still printed {completed_lines(lines)}: a partial result is not a result")
        assert not report.get("collect", {}).get("returned"), t(
            "超时后 collect_products 仍返回了部分结果", "collect_products returned a partial result after the timeout")
        assert_everyone_cleaned_up(report)


def check_error(tap: Tap) -> None:
    with tap.check("02.4") as c:
        c.skip_unless_selected()
        report = probe("error")
        lines = report["lines"]
        collect, main = report.get("collect", {}), report.get("main", {})
        c.note(f"collect_products: {collect.get('text', 'returned rows' if collect.get('returned') else '?')}")
        c.note(f"main(): {main.get('text', 'returned')}; output: {lines}")
        assert not collect.get("returned"), t(
            "第 3 条失败后 collect_products 仍然返回了结果（异常被吞掉了？）",
            "collect_products still returned rows after item 3 failed (was the error swallowed?)")
        assert collect.get("group") and collect.get("value_error"), t(
            f"应以包含 ValueError 的 ExceptionGroup 失败，实际 {collect.get('text')}",
            f"the batch should fail with an ExceptionGroup holding the ValueError, got {collect.get('text')}")
        assert not completed_lines(lines), t(f"失败后不应打印 {completed_lines(lines)}",
                                             f"a failed batch must not print {completed_lines(lines)}")
        assert_everyone_cleaned_up(report)


def check_exercise(tap: Tap) -> None:
    with tap.check("02.5") as c:
        c.skip_unless_selected()
        import importlib
        module = importlib.import_module("bounded_async")
        counter, peak = exercise_names(module)
        if not counter and not peak:
            c.skip(t("bounded_async 没有模块级 in_flight/peak 计数：练习未做",
                     "bounded_async has no module-level in_flight/peak counters: exercise not attempted"))
        assert counter and peak, t(
            f"找到了 {counter or peak}，但缺少另一个（需要运行中计数 in_flight 和峰值 peak）",
            f"found {counter or peak} but not its partner (need module-level in_flight and peak)")
        for kind in ("normal", "timeout"):
            report = probe(kind)
            values = report["exercise"]
            c.note(f"{kind}: {counter}={values['counter_value']} {peak}={values['peak_value']} "
                   f"(reads really running at once: {report['peak']})")
            assert values["counter_value"] == 0, t(
                f"{kind} 路径结束后 {counter} 应归零，实际 {values['counter_value']}（减少要放在 finally）",
                f"after the {kind} run {counter} should be back to 0, got {values['counter_value']} "
                "(decrement in finally)")
            assert values["peak_value"] <= 2, t(f"{kind} 路径峰值 {values['peak_value']} 超过 2",
                                                f"the {kind} run's peak {values['peak_value']} is over 2")
            if kind == "normal":
                assert values["peak_value"] == report["peak"], t(
                    f"{peak}={values['peak_value']}，但实际同时读取了 {report['peak']} 个：计数要包住真实 I/O",
                    f"{peak}={values['peak_value']} but {report['peak']} reads really overlapped: "
                    "count around the real I/O")


# ----- the asyncio note's demo and experiments

def script_lines(c, name: str) -> list[str]:
    path = HERE / name
    if not path.exists():  # the note's scripts are optional practice beside the curriculum
        c.skip(t(f"未做：没有 {name}（见本课 README 的 asyncio 笔记部分）",
                 f"not attempted: no {name} (see the asyncio note part of this lesson's README)"))
    done = run_python([name], cwd=HERE, timeout=SCRIPT_TIMEOUT)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    c.note(f"python {name} -> exit {done.returncode}: {lines[-8:]}")
    assert done.returncode == 0, t(f"{name} 退出码 {done.returncode}", f"{name} exited {done.returncode}")
    return lines


def in_order(lines: list[str], wanted: list[str]) -> bool:
    """True when every wanted line appears, in this order (other lines may sit between)."""
    position = 0
    for line in lines:
        if position < len(wanted) and line == wanted[position]:
            position += 1
    return position == len(wanted)


def check_demo(tap: Tap) -> None:
    with tap.check("02.6") as c:
        c.skip_unless_selected()
        lines = script_lines(c, "asyncio_timeout_demo.py")
        wanted = ["quote cancelled; cleanup", "timeout", "result: quote:degraded"]
        assert in_order(lines, wanted), t(f"应依次打印 {wanted}", f"expected these lines in order: {wanted}")
        results = [line for line in lines if line.startswith("result:")]
        assert results == ["result: quote:degraded"], t(f"结果行应只有一行，实际 {results}",
                                                        f"expected one result line, got {results}")


def check_relaxed(tap: Tap) -> None:
    with tap.check("02.7") as c:
        c.skip_unless_selected()
        lines = script_lines(c, "experiment_relaxed.py")
        assert "result: quote:100" in lines, t("应打印 result: quote:100", "expected result: quote:100")
        noise = [line for line in lines if "cancelled" in line or line == "timeout"]
        assert not noise, t(f"预算足够时不应取消或超时：{noise}", f"a sufficient budget must not cancel or time out: {noise}")


def check_swallow(tap: Tap) -> None:
    with tap.check("02.8") as c:
        c.skip_unless_selected()
        lines = script_lines(c, "experiment_swallow.py")
        assert "result: nope" in lines, t(
            "应打印 result: nope（取消被吞掉，wait_for 拿到了这个值）",
            "expected result: nope (the cancel was swallowed and wait_for got that value)")
        assert "timeout" not in lines and "result: quote:degraded" not in lines, t(
            "反例中不应出现 timeout 或降级结果", "the counter-example must show no timeout and no degraded result")


def check_taskgroup(tap: Tap) -> None:
    with tap.check("02.9") as c:
        c.skip_unless_selected()
        lines = script_lines(c, "experiment_taskgroup.py")
        cleanup = [i for i, line in enumerate(lines) if line.endswith("cancelled; cleanup")]
        caught = [i for i, line in enumerate(lines)
                  if line.startswith("caught ExceptionGroup") and "ValueError" in line]
        assert cleanup, t("兄弟任务没有打印 ... cancelled; cleanup", "the sibling did not print ... cancelled; cleanup")
        assert caught, t("没有打印 caught ExceptionGroup: ValueError(...)（用 except* 捕获）",
                         "no caught ExceptionGroup: ValueError(...) line (catch it with except*)")
        assert cleanup[0] < caught[0], t(
            "兄弟任务应在 ExceptionGroup 离开 TaskGroup 之前完成清理",
            "the sibling should finish its cleanup before the ExceptionGroup leaves the TaskGroup")
        assert "sibling cancelled: True" in lines, t("应打印 sibling cancelled: True",
                                                     "expected sibling cancelled: True")


def check_shield(tap: Tap) -> None:
    with tap.check("02.10") as c:
        c.skip_unless_selected()
        lines = script_lines(c, "experiment_shield.py")
        wanted = ["outer timeout", "inner done after timeout: False", "inner cancelled: True"]
        assert in_order(lines, wanted), t(
            f"应依次打印 {wanted}：外层超时后内层仍在运行，显式取消并等待后才结束",
            f"expected these lines in order: {wanted} -- the inner task outlives the outer timeout "
            "until it is cancelled and awaited")


def main(tap: Tap) -> None:
    check_normal_batch(tap)
    check_limits(tap)
    check_timeout(tap)
    check_error(tap)
    check_exercise(tap)
    check_demo(tap)
    check_relaxed(tap)
    check_swallow(tap)
    check_taskgroup(tap)
    check_shield(tap)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        result = run_probe(sys.argv[2])
        sys.stdout.write(PROBE_MARK + json.dumps(result, default=str) + "\n")
        sys.stdout.flush()
    else:
        from shared.tap import main_guard
        main_guard(main)
