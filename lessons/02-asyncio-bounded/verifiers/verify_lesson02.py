"""Verifier for lesson 02: prove checks 02.1–02.10.

02.1–02.5 run the learner's bounded_async.main() in a child process (lab02_probe.py, a "probe"), one
per scenario: normal, a 0.15 s budget, and a ValueError on item 3 (only the budget run has a
deadline; the learner's own budget is recorded, not used, so no machine is too slow for the others).
The probe wraps only what the learner's code looks up at call time (read_product, collect_products,
asyncio.Queue, bounded_async.asyncio, the event loop, time.sleep) and reports facts: reads running at
once, the queue's sizes, what collect_products and main() did, a stall (every task waiting for another),
a consumer that swallowed its cancellation, reads that never gave the loop back, and how the module's own
numbers moved with the reads (the exercise, 02.5: a running count and a peak, whatever their names).
Its timeline (when each read ran, in which task, how each task ended) is only for the figures of 02.2,
02.3 and 02.4, never judged.  lab02_probe.py says how each fact is seen.

This file is the judge and runs none of the learner's code; the probe is a module of its own, so the
child never loads the judge (the judge imports only the probe's PROBE_MARK and SHORT_BUDGET).

02.6–02.10 are the kit's extension (the asyncio note, not the course's exercise): lab02_note.py runs each
script and records what asyncio really did -- budgets that expired, tasks cancelled, who printed what.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab02_probe import PROBE_MARK, SHORT_BUDGET  # constants only: the probe's code runs in its child
from shared.figures import attach, bar, lane, lanes, mark, steps
from shared.i18n import t
from shared.proc import run_python
from shared.tap import Check, run

PROBE_TIMEOUT = 30.0  # a normal batch takes about 1 s; a batch that never ends is killed after this
SCRIPT_TIMEOUT = 30.0  # the note's scripts take about half a second
HERE = Path.cwd()
_probes: dict[str, dict] = {}


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  02.1-02.5 read probe runs (`python lab02_probe.py normal`,
    `timeout`, `error`: bounded_async.main() in a child process, cached); 02.6-02.10 run the note's scripts
    under lab02_note.py."""
    return [
        Check("02.1", check_normal_batch, "probe: normal"),
        Check("02.2", check_limits, "probe: normal"),
        Check("02.3", check_timeout, "probe: timeout"),
        Check("02.4", check_error, "probe: error"),
        Check("02.5", check_exercise, "probe: normal, timeout"),
        Check("02.6", check_demo, "python lab02_note.py asyncio_timeout_demo.py"),
        Check("02.7", check_relaxed, "python lab02_note.py experiment_relaxed.py"),
        Check("02.8", check_swallow, "python lab02_note.py experiment_swallow.py"),
        Check("02.9", check_taskgroup, "python lab02_note.py experiment_taskgroup.py"),
        Check("02.10", check_shield, "python lab02_note.py experiment_shield.py"),
    ]


def probe(kind: str) -> dict:
    """Run one scenario in a child process (cached: several checks read the same run)."""
    if kind not in _probes:
        import subprocess
        try:
            done = run_python(["lab02_probe.py", kind], cwd=HERE, timeout=PROBE_TIMEOUT)
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


# ----- figures: pictures of what the probe recorded, never part of a verdict

def permit_lanes(report: dict, title: str) -> dict:
    """One lane per task that read or took from the queue: a "hold" bar while each read ran (inside its
    permit), a mark where a read or a task was cancelled or failed; the budget's deadline as a line."""
    line = report["timeline"]
    reads, ends = line["reads"], line["ends"]
    getters = set(line["consumers"])
    known = [read["start"] for read in reads] + [read["end"] for read in reads if read["end"] is not None]
    last = max(known + [at for _, at, _ in ends]) if known or ends else 0.0
    rows = []
    for number, name in enumerate(line["tasks"]):
        bars, marks = [], []
        for read in (r for r in reads if r["task"] == number):
            if read["outcome"] == "injected":
                marks.append(mark(read["start"], f"read {read['id']}: ValueError", "fail"))
                continue
            end = read["end"] if read["end"] is not None else last
            bars.append(bar(read["start"], end, f"read {read['id']}", "hold"))
            if read["outcome"] == "cancelled":
                marks.append(mark(end, f"read {read['id']} cancelled", "cancel"))
            elif read["outcome"] == "error":
                marks.append(mark(end, f"read {read['id']} raised", "fail"))
        for _, at, how in (e for e in ends if e[0] == number and e[2] != "done"):
            marks.append(mark(at, t("任务被取消", "task cancelled") if how == "cancelled" else t("任务出错", "task failed"),
                              "cancel" if how == "cancelled" else "fail"))
        rows.append(lane(t(f"消费者 {number + 1}", f"consumer {number + 1}") if number in getters or not reads
                         else t(f"任务 {number + 1}", f"task {number + 1}"), bars=bars, marks=marks))
    lines = [mark(line["deadline"], t(f"预算 {SHORT_BUDGET:g} 秒到期", f"budget {SHORT_BUDGET:g} s due"), "deadline")] \
        if line.get("deadline") is not None else []
    return lanes(title, rows, lines=lines, caption=t(
        "每条：read_product 运行的时间（在 Semaphore 通行证之内）；同一时刻最多两条重叠",
        "each bar: a read_product running (inside its Semaphore permit); at most two may overlap in time"))


def permit_count(report: dict) -> dict:
    """The number of reads running, at each change, against the ceiling of two."""
    points = [(at, n) for at, n in report["timeline"]["running"]]
    return steps(t("同时进行的读取（持有通行证）", "reads running at once (holding a permit)"),
                 points[:1] and [(points[0][0], 0)] + points, limit=2, label=t("读取数", "reads"))


def blocked_loop(report: dict) -> str:
    """The reason for reads that never gave the event loop back."""
    blocking = report["blocking"]
    calls = "; ".join(blocking["sleeps"])
    return t(
        f"异步代码里有阻塞调用：{report['reads']} 次读取中有 {blocking['reads']} 次从头到尾没有把事件循环让出来——"
        "它运行期间，事件循环没有运行任何别的任务，其他读取只能排队"
        + (f"（{calls}）" if calls else "") + "。在协程里用 await asyncio.sleep(...)，不要用 time.sleep；"
        "真正阻塞的调用交给线程（第 05 课）。",
        f"blocking call in async code: {blocking['reads']} of {report['reads']} reads never gave the event loop "
        "back -- while one ran, the loop ran no other task, so the other reads could only wait"
        + (f" ({calls})" if calls else "") + ". In a coroutine use await asyncio.sleep(...), not time.sleep; "
        "hand really blocking calls to a thread (lesson 05).")


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


def check_normal_batch(c) -> None:
    report = probe("normal")
    lines = report["lines"]
    c.note(t(f"输出：{lines}", f"output: {lines}"))
    main = report.get("main", {})
    assert main.get("returned"), t(f"正常批次 main() 抛出了 {main.get('text')}",
                                   f"main() raised on the normal batch: {main.get('text')}")
    collect = report.get("collect", {})
    assert collect.get("returned"), t("collect_products 没有返回结果", "collect_products did not return rows")
    c.note(t(f"collect_products 返回了 {collect['len']} 条的 {collect['type']}；i 为 0..19 时 rows[i]['id']：{collect['ids']}",
             f"collect_products returned a {collect['type']} of {collect['len']} rows; "
             f"rows[i]['id'] for i in 0..19: {collect['ids']}"))
    assert collect["len"] == 20 and collect["ids"] == list(range(20)), t(
        "应得到 20 条，且 rows[i]['id'] == i（以 product_id 为键）",
        "expected 20 rows with rows[i]['id'] == i (keyed by product_id)")
    assert "completed 20" in lines, t("main() 没有打印 completed 20", "main() did not print completed 20")
    c.note(t(f"从队列取数的消费者：{report['consumers']} 个；读取时最多同时存在 {report['max_alive']} 个任务",
             f"consumers that took from the queue: {report['consumers']}; "
             f"most tasks alive during a read: {report['max_alive']}"))
    assert report["consumers"] == 4, t(f"应正好四个消费者，实际 {report['consumers']}",
                                       f"expected exactly four consumers, got {report['consumers']}")
    assert report["max_alive"] <= 4, t(
        f"读取时同时存在 {report['max_alive']} 个任务：不要为每件商品创建任务",
        f"{report['max_alive']} tasks were alive during a read: do not create a task per product")
    assert count(lines, "consumer closed") == 4, t(
        f"consumer closed 应打印 4 次，实际 {count(lines, 'consumer closed')}",
        f"consumer closed should print 4 times, got {count(lines, 'consumer closed')}")
    assert_everyone_cleaned_up(report)


def check_limits(c) -> None:
    report = probe("normal")
    attach(c, lambda: [permit_lanes(report, t("消费者与两张读取通行证", "consumers and the two read permits")),
                       permit_count(report)])
    c.note(t(f"同时进行的读取最多 {report['peak']} 个（共 {report['reads']} 次读取）",
             f"reads running at once, at most: {report['peak']} (over {report['reads']} reads)"))
    c.note(t(f"创建的队列：{report['queues']}", f"queues created: {report['queues']}"))
    assert not report["blocking"]["reads"], blocked_loop(report)
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


def check_timeout(c) -> None:
    report = probe("timeout")
    attach(c, lambda: permit_lanes(report, t(f"{SHORT_BUDGET:g} 秒预算到期：读取与消费者被取消",
                                             f"the {SHORT_BUDGET:g} s budget expires: reads and consumers cancelled")))
    lines = report["lines"]
    assert report["asyncio_view"], t(
        "bounded_async 里没有 asyncio 模块名（请用 import asyncio 和 asyncio.timeout）",
        "bounded_async has no module-level asyncio (use import asyncio and asyncio.timeout)")
    assert "budget_requested" in report, t("main() 没有调用 asyncio.timeout(...)",
                                           "main() never called asyncio.timeout(...)")
    c.note(t(f"main 请求 {report['budget_requested']} 秒；以 {SHORT_BUDGET} 秒运行；{report['seconds']} 秒后返回，"
             f"开始了 {report['reads']} 次读取",
             f"main asked for {report['budget_requested']} s; ran with {SHORT_BUDGET} s; "
             f"returned after {report['seconds']} s, {report['reads']} reads started"))
    c.note(t(f"输出：{lines}", f"output: {lines}"))
    assert "batch timed out" in lines, t("没有打印 batch timed out", "batch timed out was not printed")
    assert not completed_lines(lines), t(
        f"超时后仍打印了 {completed_lines(lines)}：不能把部分结果当完整结果",
        f"after the timeout it still printed {completed_lines(lines)}: a partial result is not a result")
    assert not report.get("collect", {}).get("returned"), t(
        "超时后 collect_products 仍返回了部分结果", "collect_products returned a partial result after the timeout")
    assert_everyone_cleaned_up(report)


def check_error(c) -> None:
    report = probe("error")
    attach(c, lambda: permit_lanes(report, t("第 3 条读取失败：TaskGroup 取消其余消费者",
                                             "read 3 fails: the TaskGroup cancels the other consumers")))
    lines = report["lines"]
    collect, main = report.get("collect", {}), report.get("main", {})
    returned = t("返回了结果", "returned rows") if collect.get("returned") else "?"
    c.note(f"collect_products: {collect.get('text', returned)}")
    c.note(t(f"main()：{main.get('text', '正常返回')}；输出：{lines}", f"main(): {main.get('text', 'returned')}; output: {lines}"))
    assert not collect.get("returned"), t(
        "第 3 条失败后 collect_products 仍然返回了结果（异常被吞掉了？）",
        "collect_products still returned rows after item 3 failed (was the error swallowed?)")
    assert collect.get("group") and collect.get("value_error"), t(
        f"应以包含 ValueError 的 ExceptionGroup 失败，实际 {collect.get('text')}",
        f"the batch should fail with an ExceptionGroup holding the ValueError, got {collect.get('text')}")
    assert not completed_lines(lines), t(f"失败后不应打印 {completed_lines(lines)}",
                                         f"a failed batch must not print {completed_lines(lines)}")
    assert_everyone_cleaned_up(report)


def check_exercise(c) -> None:
    normal = probe("normal")
    numbers = normal["numbers"]
    if not numbers:
        c.skip(t("bounded_async 里没有任何随读取变化的数：练习未做（练习：给 read_product 加运行中计数与峰值）",
                 "nothing of bounded_async's own changes while the reads run: exercise not attempted "
                 "(the exercise: a running count and its peak for read_product)"))
    c.note(t(f"运行中变化的数：{', '.join(numbers)}", f"numbers that change while the batch runs: {', '.join(numbers)}"))
    counter = next((label for label, seen in numbers.items() if seen["running"]), None)
    peak = next((label for label, seen in numbers.items() if seen["peak"] and label != counter), None)
    if counter is None:
        label, seen = next(iter(numbers.items()))
        really, said = seen["off_running"]
        raise AssertionError(t(
            f"这些数都不跟随正在进行的读取数：例如同时有 {really} 个读取时 {label} 是 {said}。"
            "在 Semaphore 里面、真实 I/O 前后计数：进入前加一，finally 里减一。",
            f"none of these numbers follows the reads really running: e.g. {label} was {said} while {really} "
            "read(s) ran. Count inside the Semaphore, around the real I/O: add one before it, subtract one in "
            "finally."))
    if peak is None:
        others = [(label, seen) for label, seen in numbers.items() if label != counter]
        example = t(f"：例如已见过 {others[0][1]['off_peak'][0]} 个同时读取时 {others[0][0]} 是 "
                    f"{others[0][1]['off_peak'][1]}", f": e.g. {others[0][0]} was {others[0][1]['off_peak'][1]} "
                    f"when {others[0][1]['off_peak'][0]} reads had been seen at once") if others else ""
        raise AssertionError(t(
            f"找到了运行中计数 {counter}，但没有记下它最大值的峰值{example}。每次加一后更新峰值。",
            f"found the running count {counter}, but no peak that keeps its highest value{example}. Update the "
            "peak right after each increment."))
    for kind, report in (("normal", normal), ("timeout", probe("timeout"))):
        seen = report["numbers"]
        running, top = seen.get(counter, {}), seen.get(peak, {})
        c.note(t(f"{kind}：{counter} 最后 = {running.get('final')}，{peak} = {top.get('final')}（实测同时读取最多 {report['peak']} 个）",
                 f"{kind}: {counter} ends at {running.get('final')}, {peak} = {top.get('final')} "
                 f"(reads really running at once: {report['peak']})"))
        assert running.get("running"), t(
            f"{kind} 路径里 {counter} 没有跟上真实的读取数：同时有 {running['off_running'][0]} 个读取时它是 "
            f"{running['off_running'][1]}（减少要放在 finally，取消和失败也要减）",
            f"in the {kind} run {counter} did not follow the real reads: it was {running['off_running'][1]} while "
            f"{running['off_running'][0]} read(s) ran (subtract in finally, so a cancel or failure gives it back)") \
            if running else t(f"{kind} 路径里 {counter} 没有变化", f"in the {kind} run {counter} never changed")
        assert running.get("final") == 0, t(f"{kind} 路径结束后 {counter} 应归零，实际 {running.get('final')}",
                                            f"after the {kind} run {counter} should be 0, got {running.get('final')}")
        assert top.get("peak"), t(
            f"{kind} 路径里 {peak} 不是见过的最大同时读取数：已见过 {top['off_peak'][0]} 个时它是 {top['off_peak'][1]}",
            f"in the {kind} run {peak} is not the most reads seen at once: it was {top['off_peak'][1]} when "
            f"{top['off_peak'][0]} had been seen") if top else t(f"{kind} 路径里 {peak} 没有变化",
                                                                f"in the {kind} run {peak} never changed")
        assert top.get("final") <= 2, t(f"{kind} 路径峰值 {top.get('final')} 超过 2",
                                        f"the {kind} run's peak {top.get('final')} is over 2")


# ----- the kit's extension: the asyncio note's demo and experiments (not the course's exercise)

GUIDE = "lessons/02-asyncio-bounded/README.md"
NOTE_LOGS = HERE / ".lab-logs" / "02"


def note_run(c, name: str) -> dict:
    """Run one of the note's scripts under lab02_note.py and return what asyncio really did in it."""
    path = HERE / name
    if not path.exists():  # the note's scripts are an extension beyond the course
        c.skip(t(f"未做：没有 {name}。要写什么见 {GUIDE} 的“扩展：asyncio 笔记的脚本”一节（代码与要打印的行）",
                 f"not taken up: no {name}. What to write: {GUIDE}, section \"Extension: the asyncio note's "
                 "scripts\" (the code and the lines to print)"))
    NOTE_LOGS.mkdir(parents=True, exist_ok=True)
    out = NOTE_LOGS / (Path(name).stem + ".json")
    out.unlink(missing_ok=True)
    import subprocess
    try:
        done = run_python(["lab02_note.py", name, str(out)], cwd=HERE, timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(t(f"python {name} {SCRIPT_TIMEOUT:g} 秒没有结束（正常约半秒）",
                               f"python {name} did not end within {SCRIPT_TIMEOUT:g} s (it takes about half a "
                               "second)")) from None
    assert out.exists(), t(f"运行 {name} 没有留下记录：\n{done.stdout[-800:]}",
                           f"running {name} left no record:\n{done.stdout[-800:]}")
    run = json.loads(out.read_text(encoding="utf-8"))
    run["texts"] = [line["text"] for line in run["lines"] if line["text"]]
    run["by_id"] = {task["id"]: task for task in run["tasks"]}
    c.note(t(f"python {name} -> {run['outcome']}，输出：{run['texts'][-8:]}",
             f"python {name} -> {run['outcome']}, output: {run['texts'][-8:]}"))
    assert run["outcome"] == "ok", t(f"{name} 异常结束：{run['outcome']}\n{done.stdout[-600:]}",
                                     f"{name} failed: {run['outcome']}\n{done.stdout[-600:]}")
    return run


def budget_note(c, run: dict) -> None:
    for budget in run["budgets"]:
        c.note(t(f"asyncio.{budget['kind']}({budget['delay']}) 结束方式：{budget.get('outcome', '未结束')}"
                 + (f"，返回 {budget['value']!r}" if "value" in budget else ""),
                 f"asyncio.{budget['kind']}({budget['delay']}) ended: {budget.get('outcome', 'never')}"
                 + (f", returning {budget['value']!r}" if "value" in budget else "")))


def printed_while_cancelled(run: dict, ending: str) -> list[dict]:
    """Lines ending with `ending` that a task printed while it was being cancelled."""
    return [line for line in run["lines"] if line["text"].endswith(ending) and line["cancelling"]]


def in_order(lines: list[str], wanted: list[str]) -> bool:
    """True when every wanted line appears, in this order (other lines may sit between)."""
    position = 0
    for line in lines:
        if position < len(wanted) and line == wanted[position]:
            position += 1
    return position == len(wanted)


NO_WORK = ("（只打印这几行不算：要真的运行它们描述的事）", " (printing the lines is not enough: the script must do what they say)")


def check_demo(c) -> None:
    run = note_run(c, "asyncio_timeout_demo.py")
    budget_note(c, run)
    expired = [b for b in run["budgets"] if b.get("outcome") == "TimeoutError"]
    assert expired, t("没有任何 asyncio.wait_for / asyncio.timeout 以 TimeoutError 结束：预算没有真的到期" + NO_WORK[0],
                      "no asyncio.wait_for / asyncio.timeout ended in TimeoutError: no budget really expired"
                      + NO_WORK[1])
    budget = expired[0]
    cleanup = printed_while_cancelled(run, "cancelled; cleanup")
    assert cleanup, t(
        "没有哪个任务在被取消时打印 ... cancelled; cleanup：在慢调用的 except asyncio.CancelledError 里清理并打印，再 raise",
        "no task printed ... cancelled; cleanup while it was being cancelled: clean up and print in the slow "
        "call's except asyncio.CancelledError, then raise")
    printer = run["by_id"].get(cleanup[0]["task"], {})
    c.note(t(f"清理行由任务 #{printer.get('id')} 在被取消时打印；它最后 {printer.get('state')}",
             f"the cleanup line was printed by task #{printer.get('id')} while being cancelled; it ended "
             f"{printer.get('state')}"))
    assert printer.get("state") == "cancelled" or printer.get("id") == budget["task"], t(
        f"打印清理行的任务最后是 {printer.get('state')}，不是 cancelled：清理后要重新 raise，取消才算完成",
        f"the task that printed the cleanup ended {printer.get('state')}, not cancelled: re-raise after the "
        "cleanup, so the cancellation completes")
    assert cleanup[0]["at"] < budget["end"], t(
        "TimeoutError 在清理之前就到了：wait_for 应先等被取消的任务清理完",
        "the TimeoutError came before the cleanup: wait_for waits for the cancelled task to clean up first")
    wanted = ["quote cancelled; cleanup", "timeout", "result: quote:degraded"]
    assert in_order(run["texts"], wanted), t(f"应依次打印 {wanted}", f"expected these lines in order: {wanted}")
    results = [line for line in run["texts"] if line.startswith("result:")]
    assert results == ["result: quote:degraded"], t(f"结果行应只有一行，实际 {results}",
                                                    f"expected one result line, got {results}")


def check_relaxed(c) -> None:
    run = note_run(c, "experiment_relaxed.py")
    budget_note(c, run)
    in_time = [b for b in run["budgets"] if b.get("outcome") == "returned"]
    assert in_time, t("没有任何 asyncio.wait_for / asyncio.timeout 按时正常结束" + NO_WORK[0],
                      "no asyncio.wait_for / asyncio.timeout ended in time" + NO_WORK[1])
    asked = [task["id"] for task in run["tasks"] if task["cancel_calls"]]
    assert not asked, t(f"预算足够时不应取消任何任务，实际被取消：任务 {asked}",
                        f"a sufficient budget must cancel nothing, yet task(s) {asked} were asked to cancel")
    assert "result: quote:100" in run["texts"], t("应打印 result: quote:100", "expected result: quote:100")
    noise = [line for line in run["texts"] if "cancelled" in line or line == "timeout"]
    assert not noise, t(f"预算足够时不应取消或超时：{noise}", f"a sufficient budget must not cancel or time out: {noise}")


def check_swallow(c) -> None:
    run = note_run(c, "experiment_swallow.py")
    budget_note(c, run)
    swallowed = [task for task in run["tasks"] if task["cancel_calls"] and task["state"] == "returned"]
    assert swallowed, t(
        "没有任务在被要求取消后照常返回：反例要让慢调用吞掉 CancelledError（except 里 return，不 raise）" + NO_WORK[0],
        "no task went on to return after it was asked to cancel: the counter-example's slow call swallows "
        "CancelledError (return in the except, no raise)" + NO_WORK[1])
    value = swallowed[0].get("value")
    c.note(t(f"任务 #{swallowed[0]['id']} 被要求取消，却返回了 {value!r}",
             f"task #{swallowed[0]['id']} was asked to cancel and returned {value!r} instead"))
    handed = [b for b in run["budgets"] if b.get("outcome") == "returned" and b.get("value") == value]
    assert handed, t(f"预算没有把被吞掉取消的值 {value!r} 交回（wait_for 应返回它）",
                     f"the budget did not hand back the swallowed value {value!r} (wait_for returns it)")
    assert f"result: {value}" in run["texts"], t(
        f"应打印 result: {value}（取消被吞掉，wait_for 拿到了这个值）",
        f"expected result: {value} (the cancel was swallowed and wait_for got that value)")
    assert "timeout" not in run["texts"] and "result: quote:degraded" not in run["texts"], t(
        "反例中不应出现 timeout 或降级结果", "the counter-example must show no timeout and no degraded result")


def check_taskgroup(c) -> None:
    run = note_run(c, "experiment_taskgroup.py")
    groups = [g for g in run["groups"] if g.get("raised") in ("ExceptionGroup", "BaseExceptionGroup")
              and any(inner.startswith("ValueError") for inner in g["inner"])]
    for group in run["groups"]:
        c.note(t(f"TaskGroup（任务 {group['tasks']}）退出时抛出 {group.get('raised')}：{group.get('inner')}",
                 f"TaskGroup (tasks {group['tasks']}) raised on exit: {group.get('raised')} {group.get('inner')}"))
    assert groups, t("没有 asyncio.TaskGroup 以含 ValueError 的 ExceptionGroup 结束" + NO_WORK[0],
                     "no asyncio.TaskGroup ended with an ExceptionGroup holding a ValueError" + NO_WORK[1])
    group = groups[0]
    siblings = [run["by_id"][n] for n in group["tasks"] if n in run["by_id"]
                and run["by_id"][n]["cancel_calls"] and run["by_id"][n]["state"] == "cancelled"]
    assert siblings, t("组里没有兄弟任务被取消：TaskGroup 里一个失败时，其余任务应被取消",
                       "no sibling in the group was cancelled: when one child fails, the TaskGroup cancels the rest")
    sibling = siblings[0]["id"]
    cleanup = [line for line in printed_while_cancelled(run, "cancelled; cleanup") if line["task"] == sibling]
    assert cleanup, t("被取消的兄弟任务没有在取消时打印 ... cancelled; cleanup",
                      "the cancelled sibling did not print ... cancelled; cleanup while being cancelled")
    assert cleanup[0]["at"] < group["end"], t(
        "兄弟任务应在 ExceptionGroup 离开 TaskGroup 之前完成清理",
        "the sibling should finish its cleanup before the ExceptionGroup leaves the TaskGroup")
    caught = [line for line in run["lines"] if line["text"].startswith("caught ExceptionGroup")
              and "ValueError" in line["text"] and line["at"] > group["end"]]
    assert caught, t("没有打印 caught ExceptionGroup: ValueError(...)（用 except* 捕获）",
                     "no caught ExceptionGroup: ValueError(...) line (catch it with except*)")
    assert "sibling cancelled: True" in run["texts"], t("应打印 sibling cancelled: True",
                                                        "expected sibling cancelled: True")


def check_shield(c) -> None:
    run = note_run(c, "experiment_shield.py")
    budget_note(c, run)
    assert run["shields"], t("没有调用 asyncio.shield" + NO_WORK[0], "asyncio.shield was never called" + NO_WORK[1])
    inner = run["shields"][0]["inner"]
    expired = [b for b in run["budgets"] if b.get("outcome") == "TimeoutError" and b["start"] > run["shields"][0]["at"]]
    assert expired, t("shield 之后外层预算没有到期（TimeoutError）", "the outer budget around the shield never expired")
    assert inner in expired[0]["unfinished"], t(
        "外层超时时被 shield 保护的任务已经结束：它应在超时后仍在运行",
        "the shielded task had already ended when the outer budget expired: it should outlive the timeout")
    task = run["by_id"].get(inner, {})
    main_end = run["by_id"].get(1, {}).get("ended", float("inf"))
    ours = [at for at in task.get("cancel_calls", []) if expired[0]["end"] < at < main_end]
    c.note(t(f"被保护的任务 #{inner}：超时时仍在运行；之后 cancel() 调用 {len(ours)} 次，最后 {task.get('state')}",
             f"shielded task #{inner}: still running at the timeout; cancel() called {len(ours)} time(s) after it, "
             f"ended {task.get('state')}"))
    assert ours, t("超时后没有由你的代码 cancel() 这个任务（asyncio.run 收尾时的取消不算）：谁 shield 了它，谁负责取消",
                   "your code never cancel()ed the task after the timeout (asyncio.run's own clean-up does not "
                   "count): whoever shields it must cancel it")
    assert task.get("state") == "cancelled" and task.get("ended", float("inf")) < main_end, t(
        "被取消的任务没有在 main() 结束前被等待到结束：cancel() 之后还要 await 它",
        "the cancelled task was not awaited to its end before main() finished: await it after cancel()")
    wanted = ["outer timeout", "inner done after timeout: False", "inner cancelled: True"]
    assert in_order(run["texts"], wanted), t(
        f"应依次打印 {wanted}：外层超时后内层仍在运行，显式取消并等待后才结束",
        f"expected these lines in order: {wanted} -- the inner task outlives the outer timeout "
        "until it is cancelled and awaited")


if __name__ == "__main__":
    run(checks())
