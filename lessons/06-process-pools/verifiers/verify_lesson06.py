"""Verifier for lesson 06: CPU work in a spawn process pool, proved by running it.

06.1  process_export.py run as a script: the serial and the pool results are recorded
      call by call and must be equal for the same inputs; when the pool is made to
      return different numbers, the script itself must refuse (its assert)
06.2  importing cpu_work / process_export / verify_process (also the way a spawned worker
      imports a script, as __mp_main__) builds no pool and starts no process; the pool the
      script builds was given a spawn context; its target can be imported by module + name
      (and cpu_work.py defines score_text at module level)
06.3  the printed serial/process seconds really cover their own computations, and the
      script runs to the end when the pool is the slower side (no speed is assumed)
06.4  with the target replaced by a function local to another function, main() fails with
      a pickling error and the pool yields no result; process_pool_review.py runs
06.5  verify_process.py with a worker that calls os._exit: "batch failed: worker process
      lost" is printed and BrokenProcessPool comes back out
06.6  exercise (the course's: rounds 10 and 2000, compared): `python process_export.py` and
      `python process_export.py 10` are run and the rounds score_text really got are read on both sides.
      Rounds 10 and 2000 must each run on both sides with the same inputs, equal results and their own
      timings printed; rounds 10 seen nowhere = not attempted (no name is called: main() is not asked
      to take a parameter)

How: each scenario runs in a fresh interpreter (a "probe") that imports lab06_probe.py,
swaps in a recording ProcessPoolExecutor subclass and a recording score_text, runs the
learner's script or main(), and prints one JSON line.  Workers stay real spawned
processes; for the fault drills the pool's target is swapped for a top-level function
of lab06_probe.py (a spawned worker can import it, as it imports cpu_work).  Timings are
printed and compared only with the learner's own timers -- never against a speed.
In the real runs the pool's target, when a worker can import it by name, is wrapped in pool_timed:
the learner's function runs unchanged and the worker notes when each call began and ended, for
the serial-versus-pool timeline figures of 06.3 and 06.6 (pictures, never part of a verdict).
Probe logs go to .lab-logs/06/ in the working directory.

This file is the judge: the probe's code lives in a module of its own, so neither the probe nor
its workers load the judge, and the judge runs none of the learner's code (it imports only MARK).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from lab06_probe import MARK  # the line the probe's report is on (only this: the judge runs no probe code)
from shared.figures import attach, bar, lane, lanes, mark
from shared.i18n import t
from shared.tap import Check, run as run_checks  # `run` names a probe run here

WORK = Path.cwd()
LOGS = WORK / ".lab-logs" / "06"
PROBE = "import lab06_probe as p; p.probe()"  # a probe interpreter's program (python -c)
ROUNDS_EXERCISE = (10, 2000)
# The learner prints perf_counter() differences; allow for a value printed with 2 decimals.
PRINT_ROUNDING = 0.06
# Backstops for a probe that never ends; a probe takes a few seconds (the real computation runs
# 4 x 2000 rounds twice), and a busy machine may take many times that.
PROBE_BOUND = 60.0
HEAVY_PROBE_BOUND = 120.0


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  Each reads probe runs (PROBES: a fresh interpreter that
    imports lab06_probe.py and runs the learner's script or main() with real spawned workers; each run at most
    once)."""
    return [
        Check("06.1", lambda c: check_results(c, PROBES), "probes: process_export.py real, mismatch"),
        Check("06.2", lambda c: check_structure(c, PROBES), "probes: imports; process_export.py real"),
        Check("06.3", lambda c: check_timings(c, PROBES), "probes: process_export.py real, equal"),
        Check("06.4", lambda c: check_local_function(c, PROBES), "probe: local; python process_pool_review.py"),
        Check("06.5", lambda c: check_broken_pool(c, PROBES), "probe: verify_process.py with a dying worker"),
        Check("06.6", lambda c: check_exercise(c, PROBES), "probes: process_export.py real, and with 10"),
    ]


def _run(argv: list[str], log_name: str, timeout: float) -> tuple[int, list[str]]:
    """Run a process we own (its own session: pool workers included) with a bounded wait."""
    from shared.proc import Process, WaitTimeout, wait_until

    log = LOGS / log_name
    log.unlink(missing_ok=True)
    proc = Process(argv, cwd=WORK, log_path=log)
    try:
        wait_until(lambda: not proc.alive(), timeout, f"{log_name} to finish")
    except WaitTimeout:
        proc.stop(grace=2)
        tail = proc.log_tail(8)
        raise AssertionError(t(f"{' '.join(argv[1:3])} 在 {timeout:g} 秒内没有结束：\n{tail}",
                               f"{' '.join(argv[1:3])} did not finish within {timeout:g} s:\n{tail}")) from None
    code = proc.stop()
    return code, proc.log_text().splitlines()


class Probes:
    """Runs each probe scenario at most once; several checks read the same run."""

    def __init__(self):
        self.cache: dict[tuple, dict] = {}

    def get(self, *args: str, timeout: float = PROBE_BOUND) -> dict:
        if args not in self.cache:
            name = "probe-" + "-".join(a.replace(".py", "") for a in args) + ".log"
            code, lines = _run([sys.executable, "-c", PROBE, *args], name, timeout)
            found = [line for line in lines if line.startswith(MARK)]
            if not found:
                self.cache[args] = {"broken": True, "exit": code, "output": lines[-12:]}
            else:
                report = json.loads(found[-1][len(MARK):])
                report["output"] = [line for line in lines if not line.startswith(MARK)]
                self.cache[args] = report
        report = self.cache[args]
        if report.get("broken"):
            raise AssertionError(t(f"探针 {' '.join(args)} 没有给出结果（退出码 {report['exit']}）：\n",
                                   f"the probe {' '.join(args)} gave no result (exit code {report['exit']}):\n")
                                 + "\n".join(report["output"]))
        return report

    def script(self, path: str, fake: str, *extra: str) -> dict:
        return self.get("script", path, fake, *extra, timeout=HEAVY_PROBE_BOUND if fake == "real" else PROBE_BOUND)


PROBES = Probes()


def _error_text(error: dict | None) -> str:
    if not error:
        return t("无异常", "no exception")
    message = error["message"].strip()
    return f"{error['type']}: {message.splitlines()[0]}" if message else error["type"]


def _secs(value: float) -> str:
    return f"{value:.4f}" if abs(value) >= 0.001 else f"{value:.1e}"


def _error_notes(c, error: dict | None) -> None:
    if error:
        for line in error.get("tail", []):
            c.note("  " + line)


def _timing_lines(run: dict) -> dict:
    """label -> how many serial / process timing lines the run printed."""
    found = {"serial": 0, "process": 0}
    for _, line in run.get("lines", []):
        match = TIMING.match(line)
        if match:
            found[match.group(1).lower()] += 1
    return found


TIMING = re.compile(r"^\s*(serial|process)\b[^0-9\-]*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", re.I)


def _timings(run: dict) -> dict:
    """label -> (printed seconds, when the line was written) for the first serial/process lines."""
    found = {}
    for stamp, line in run.get("lines", []):
        match = TIMING.match(line)
        if match and match.group(1).lower() not in found:
            found[match.group(1).lower()] = (float(match.group(2)), stamp)
    return found


def _printed(c, run: dict, script: str = "process_export.py") -> None:
    lines = [line for _, line in run.get("lines", [])][:4]
    c.note(t(f"python {script} 输出：", f"python {script} printed: ")
           + (" | ".join(lines) if lines else t("（没有输出）", "(nothing)")))


def _values(run: dict) -> tuple[list, list]:
    serial = [entry[1] for entry in run["serial"]]
    pooled = [value for _, value, _ in sorted(run["pool_results"], key=lambda r: r[0])]
    return serial, pooled


def _rounds_seen(run: dict) -> tuple[set, set]:
    return {entry[0][2] for entry in run["serial"]}, {call[2] for call in run["pool_calls"]}


def serial_and_pool(run: dict, title: str) -> dict:
    """One time axis: the serial score_text calls in the main process, then the pool -- the main process
    from building it to its shutdown, each result as it came back -- and a lane per worker process with a
    bar per call it ran.  Every time is perf_counter, one clock for all processes of the machine."""
    rows = [lane(t("串行（主进程）", "serial (main process)"),
                 bars=[bar(start, end, f"rounds={key[2]}", "serial") for key, _, start, end in run["serial"][:200]])]
    waits, marks = [], []
    for pool in run["pools"]:
        began = pool.get("t_init", pool.get("t_submit"))
        if began is not None:
            ended = pool.get("t_shutdown") or max([r[2] for r in run["pool_results"]] + [began])
            waits.append(bar(began, ended, "ProcessPoolExecutor", "wait"))
    marks += [mark(stamp, f"result #{index + 1}", "ok") for index, _, stamp in run["pool_results"][:200]]
    marks += [mark(stamp, line.strip()[:40], "event") for stamp, line in run["lines"] if TIMING.match(line)][:20]
    rows.append(lane(t("进程池（主进程）", "pool (main process)"), bars=waits, marks=marks))
    workers: dict[int, list] = {}
    for pid, start, end, rounds in run.get("worker_calls", []):
        workers.setdefault(pid, []).append(bar(start, end, f"rounds={rounds}", "pool"))
    rows += [lane(t(f"工作进程 {pid}", f"worker process {pid}"), bars=bars) for pid, bars in workers.items()]
    return lanes(title, rows[:20], caption=t(
        "同一时间轴：先串行逐个计算，再由工作进程并行计算；主进程的进程池条从建池到关闭（含启动工作进程）",
        "one time axis: first each call in turn, then the worker processes in parallel; the pool bar in the "
        "main process runs from building the pool to its shutdown (starting the workers included)"))


# ---------------------------------------------------------------- 06.1

def check_results(c, probes: Probes) -> None:
    run = probes.script("process_export.py", "real")
    _printed(c, run)
    error = run["error"]
    if not run["pools"] or len(run["pool_results"]) < len(run["pool_calls"]) or not run["pool_calls"]:
        _error_notes(c, error)
        raise AssertionError(t(
            f"进程池没有交回每个结果（建池 {len(run['pools'])} 次，提交 {len(run['pool_calls'])} 个，"
            f"收到 {len(run['pool_results'])} 个）；脚本以 {_error_text(error)} 结束。",
            f"the pool did not hand back every result ({len(run['pools'])} pool(s), "
            f"{len(run['pool_calls'])} call(s) submitted, {len(run['pool_results'])} result(s) received); "
            f"the script ended with {_error_text(error)}."))
    assert run["serial"], t(
        "串行部分没有调用 cpu_work 的 score_text：两边要用同一个函数。",
        "the serial part never called score_text from cpu_work: both sides must use the same function.")
    serial_calls = [entry[0] for entry in run["serial"]]
    assert serial_calls == run["pool_calls"], t(
        f"两边的输入不同：串行 {len(serial_calls)} 次调用，rounds {sorted(_rounds_seen(run)[0], key=str)}；"
        f"进程池 {len(run['pool_calls'])} 次，rounds {sorted(_rounds_seen(run)[1], key=str)}。"
        "两边要用同样的 texts 和 rounds。",
        f"the two sides got different inputs: serial {len(serial_calls)} call(s) with rounds "
        f"{sorted(_rounds_seen(run)[0], key=str)}, pool {len(run['pool_calls'])} call(s) with rounds "
        f"{sorted(_rounds_seen(run)[1], key=str)}. Use the same texts and rounds on both sides.")
    serial, pooled = _values(run)
    c.note(t(f"串行结果 {serial}", f"serial results  {serial}"))
    c.note(t(f"进程池结果 {pooled}", f"process results {pooled}"))
    assert serial == pooled, t(
        "同样的输入，两边结果不同：score_text 必须只依赖 text 和 rounds（例如用 ord，不要用每个进程都不同的 hash）。",
        "same inputs, different results: score_text must depend on text and rounds only "
        "(ord() is the same everywhere; hash() of a str differs from process to process).")
    if error:
        c.note(t(f"（结果一致；脚本随后以 {_error_text(error)} 结束，见 06.3）",
                 f"(results match; the script then ended with {_error_text(error)}, see 06.3)"))

    # The script must check this itself: hand it pool results that are one off.
    odd = probes.script("process_export.py", "mismatch")
    odd_error = odd["error"]
    c.note(t(f"让进程池每个结果都差 1 之后：脚本以 {_error_text(odd_error)} 结束",
             f"with every pool result one off: the script ended with {_error_text(odd_error)}"))
    assert odd["pool_results"], t(
        "比较实验里进程池没有交回结果：" + _error_text(odd_error),
        "in the comparison drill the pool handed back no results: " + _error_text(odd_error))
    assert odd_error is not None and not odd_error["bpp"], t(
        "结果不一致时脚本照常结束：保留 assert serial == parallel，让错误结果无法被当成成功。",
        "the script finished normally although the results differed: keep assert serial == parallel, "
        "so a wrong result can never pass as a success.")


# ---------------------------------------------------------------- 06.2

def check_structure(c, probes: Probes) -> None:
    # The target: a module-level def in cpu_work.py (ast: nested defs are not in tree.body).
    tree = ast.parse((WORK / "cpu_work.py").read_text(encoding="utf-8"), "cpu_work.py")
    top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "score_text" in top, t(
        "cpu_work.py 的模块顶层没有 def score_text：子进程只能按模块名和函数名导入顶层函数。",
        "cpu_work.py has no module-level def score_text: a worker can only import a top-level function "
        "by module and name.")
    c.note(t("cpu_work.py 在模块顶层定义 score_text（ast）", "cpu_work.py defines score_text at module level (ast)"))

    # Importing must start nothing -- also the way spawn re-imports a script in each worker.
    imports = probes.get("imports")
    for step in imports["steps"]:
        error = step["error"]
        tripped = step["pools"] or step["processes"]
        if tripped:
            c.note(f"{step['name']}: " + t(f"建池 {step['pools']} 次，启动进程 {step['processes']} 个",
                                            f"{step['pools']} pool(s), {step['processes']} process(es)"))
        assert not tripped, t(
            f"{step['name']} 时就创建了进程池或启动了进程。spawn 的每个工作进程都会重新导入脚本（作为 __mp_main__），"
            "所以建池只能写在函数里，并由 if __name__ == \"__main__\": 调用。",
            f"{step['name']} already built a pool or started a process. Every spawned worker imports the "
            "script again (as __mp_main__), so the pool must only be built inside a function that "
            "if __name__ == \"__main__\": calls.")
        assert error is None, t(f"{step['name']} 出错：{_error_text(error)}",
                                f"{step['name']} failed: {_error_text(error)}")
    c.note(t("不建池、不启动进程：", "no pool and no process while: ")
           + ", ".join(step["name"] for step in imports["steps"]))

    run = probes.script("process_export.py", "real")
    assert run["pools"], t(
        f"python process_export.py 没有创建进程池（{_error_text(run['error'])}）：入口保护下要调用 main()。",
        f"python process_export.py built no pool ({_error_text(run['error'])}): the __main__ guard "
        "must call main().")
    for pool in run["pools"]:
        c.note(t(f"进程池：max_workers={pool['max_workers']}，mp_context={pool['explicit']}，"
                 f"实际启动方式 {pool['effective']}",
                 f"pool: max_workers={pool['max_workers']}, mp_context={pool['explicit']}, "
                 f"start method in use {pool['effective']}"))
        assert pool["explicit"] == "spawn", t(
            f"没有显式传入 spawn（mp_context={pool['explicit']}，这里的默认是 {pool['effective']}）。"
            "默认值随平台和 Python 版本变化：传 mp_context=mp.get_context(\"spawn\")。",
            f"spawn is not passed explicitly (mp_context={pool['explicit']}, this platform's default is "
            f"{pool['effective']}). The default changes with platform and Python version: pass "
            "mp_context=mp.get_context(\"spawn\").")
    targets = {(x["module"], x["qualname"], x["importable"]) for x in run["targets"]}
    for module, qualname, importable in sorted(targets, key=str):
        c.note(t(f"提交给进程池的函数：{module}.{qualname}（子进程{'可以' if importable else '无法'}按名导入）",
                 f"function sent to the pool: {module}.{qualname} "
                 f"({'importable' if importable else 'not importable'} by name in a worker)"))
        assert importable, t(
            f"{module}.{qualname} 不是可导入模块的顶层函数（lambda、闭包或局部函数）：把它放到 cpu_work.py 顶层。",
            f"{module}.{qualname} is not a top-level function of an importable module (a lambda, closure "
            "or local function): put it at the top of cpu_work.py.")
    assert targets, t("进程池没有收到任何函数。", "the pool never received a function.")


# ---------------------------------------------------------------- 06.3

def check_timings(c, probes: Probes) -> None:
    run = probes.script("process_export.py", "real")
    attach(c, lambda: serial_and_pool(run, t("串行与进程池：python process_export.py",
                                             "serial and pool: python process_export.py")))
    found = _timings(run)
    _printed(c, run)
    for label in ("serial", "process"):
        assert label in found, t(
            f"没有打印 {label} 耗时（形如 \"{label} 0.42\"）：{_error_text(run['error'])}",
            f"no {label} timing was printed (like \"{label} 0.42\"): {_error_text(run['error'])}")
    serial_value, serial_line = found["serial"]
    process_value, process_line = found["process"]

    # The first serial/process pair is judged against its own work: the serial calls before the first
    # pool, that pool's results (a script that compares several sizes in one run prints a pair for each).
    pools = sorted((pool for pool in run["pools"] if "t_submit" in pool), key=lambda pool: pool["t_submit"])
    first_pool = pools[0]["t_submit"] if pools else float("inf")
    next_pool = pools[1]["t_submit"] if len(pools) > 1 else float("inf")
    calls = [call for call in run["serial"] if call[3] <= first_pool] or run["serial"]
    # Serial: the printed value must at least cover the score_text calls themselves.
    assert calls, t("没有记录到串行的 score_text 调用。", "no serial score_text call was recorded.")
    serial_work = max(call[3] for call in calls) - min(call[2] for call in calls)
    c.note(t(f"串行：打印 {serial_value:.3f} 秒，其中 score_text 调用本身 {serial_work:.3f} 秒",
             f"serial: printed {serial_value:.3f} s; the score_text calls themselves took {serial_work:.3f} s"))
    assert serial_value >= serial_work - PRINT_ROUNDING, t(
        f"serial 打印 {serial_value:.3f} 秒，比串行计算本身（{serial_work:.3f} 秒）还短：计时要包住整段串行计算。",
        f"serial prints {serial_value:.3f} s, less than the serial computation itself ({serial_work:.3f} s): "
        "the timer must wrap the whole serial computation.")

    # Process: from the first submit (workers start then) to the last result, and nothing
    # from before the pool's work began.
    results = [r for r in run["pool_results"] if first_pool <= r[2] < next_pool]
    assert pools and results, t(f"进程池没有交回结果：{_error_text(run['error'])}",
                                f"the pool handed back no results: {_error_text(run['error'])}")
    began = first_pool
    pool_work = max(r[2] for r in results) - began
    before = [call[3] for call in calls if call[3] <= began]
    earliest = max(before) if before else run["t_start"]
    window = process_line - earliest
    c.note(t(f"进程：打印 {process_value:.3f} 秒；首次提交到最后一个结果 {pool_work:.3f} 秒，"
             f"进程池开工前的上一步到这行输出 {window:.3f} 秒",
             f"process: printed {process_value:.3f} s; first submit to last result {pool_work:.3f} s, "
             f"last step before the pool's work to that line {window:.3f} s"))
    assert process_value >= pool_work - PRINT_ROUNDING, t(
        f"process 打印 {process_value:.3f} 秒，比从提交到拿到全部结果（{pool_work:.3f} 秒）还短："
        "计时要从建池前开始，到拿到结果之后结束——启动进程的成本也是实测的一部分。",
        f"process prints {process_value:.3f} s, less than submitting the work and getting every result "
        f"({pool_work:.3f} s): start the timer before the pool and stop it after the results -- starting "
        "the workers is part of what you measure.")
    assert process_value <= window + PRINT_ROUNDING, t(
        f"process 打印 {process_value:.3f} 秒，但进程池开工前的上一步到这行输出只有 {window:.3f} 秒："
        "计时包含了串行部分。在进程池前重新 started = perf_counter()。",
        f"process prints {process_value:.3f} s, yet only {window:.3f} s passed between the step before the "
        "pool and that line: the timer includes the serial part. Reset started = perf_counter() before "
        "the pool.")
    ratio = process_value / serial_value if serial_value > 0 else float("inf")
    c.note(t(f"本次实测：进程池用时是串行的 {ratio:.2f} 倍（只记录，不作要求）",
             f"this run: the pool took {ratio:.2f}x the serial time (recorded, not judged)"))

    # A pool that is slower than serial is a valid result: the script must still run to the end.
    slow = probes.script("process_export.py", "equal")
    slow_found = _timings(slow)
    if "serial" in slow_found and "process" in slow_found:
        c.note(t(f"让计算几乎为零（进程池只剩启动成本）：serial {_secs(slow_found['serial'][0])}，"
                 f"process {_secs(slow_found['process'][0])}",
                 f"with the computation made nearly free (the pool pays only its start-up): serial "
                 f"{_secs(slow_found['serial'][0])}, process {_secs(slow_found['process'][0])}"))
    if slow["error"]:
        _error_notes(c, slow["error"])
    assert slow["error"] is None, t(
        f"进程池比串行慢时脚本失败了：{_error_text(slow['error'])}。小任务上进程池更慢是有效的实测结果，"
        "不要断言进程池更快，只断言结果一致。",
        f"the script failed when the pool was the slower side: {_error_text(slow['error'])}. A slower "
        "pool on small work is a valid measurement: never assert that the pool is faster, only that "
        "the results match.")
    assert "serial" in slow_found and "process" in slow_found, t(
        "进程池较慢时没有打印两个耗时。", "with the slower pool the two timings were not printed.")


# ---------------------------------------------------------------- 06.4

def check_local_function(c, probes: Probes) -> None:
    code, lines = _run([sys.executable, "process_pool_review.py"], "process_pool_review.log", PROBE_BOUND)
    c.note(t(f"python process_pool_review.py → 退出码 {code}", f"python process_pool_review.py → exit code {code}"))
    for line in lines[-4:]:
        c.note("  " + line)
    assert code == 0, t("process_pool_review.py 应正常运行（它只确认 score_text 来自 cpu_work 且可调用）。",
                        "process_pool_review.py should run cleanly (it only confirms score_text comes "
                        "from cpu_work and is callable).")

    run = probes.get("local")
    error = run["error"]
    targets = sorted({f"{x['module']}.{x['qualname']}" for x in run["targets"]})
    c.note(t(f"把 score_text 换成另一个函数里的局部函数后调用 main()：提交给进程池的是 {targets or '无'}",
             f"main() with score_text swapped for a function local to another function: the pool was "
             f"sent {targets or 'nothing'}"))
    c.note(t(f"结果：{_error_text(error)}", f"outcome: {_error_text(error)}"))
    assert targets and any("<locals>" in name for name in targets), t(
        "进程池没有收到这个局部函数：main() 应把 cpu_work 的 score_text 交给进程池。",
        "the pool never received the local function: main() should hand score_text from cpu_work "
        "to the pool.")
    printed = [line for _, line in run["lines"]]
    assert error is not None, t(
        "目标是局部函数，main() 却正常结束了"
        + (f"（还打印了 {printed[-1]!r}）" if printed else "")
        + "：序列化错误被吞掉或换成了别的结果。让它抛出来——不能跨进程的函数就不能算成功。",
        "the target was a local function, yet main() finished normally"
        + (f" (it even printed {printed[-1]!r})" if printed else "")
        + ": the pickling error was swallowed or replaced by some other result. Let it propagate -- a "
          "function that cannot cross into a worker must not count as success.")
    assert error["pickle"], t(
        f"期望序列化（pickle）错误，实际 {_error_text(error)}",
        f"expected a pickling error, got {_error_text(error)}")
    assert not run["pool_results"], t(
        f"进程池仍交回了 {len(run['pool_results'])} 个结果。",
        f"the pool still handed back {len(run['pool_results'])} result(s).")
    assert "process" not in _timings(run), t(
        "序列化失败后仍打印了 process 耗时：失败的批次不应看起来像完成了。",
        "the process timing was printed after the pickling failure: a failed batch must not look finished.")
    c.note(t("进程池没有交回任何结果，也没有打印 process 耗时。",
             "the pool handed back no result and no process timing was printed."))


# ---------------------------------------------------------------- 06.5

def check_broken_pool(c, probes: Probes) -> None:
    run = probes.script("verify_process.py", "die")
    printed = [line for _, line in run["lines"]]
    error = run["error"]
    c.note(t("python verify_process.py，进程池目标换成调用 os._exit(17) 的函数（工作进程直接消失）：",
             "python verify_process.py with the pool's target swapped for one that calls os._exit(17) "
             "(the worker just vanishes):"))
    for line in printed[-4:] or [t("（没有输出）", "(no output)")]:
        c.note("  " + line)
    c.note(t(f"交回调用者的异常：{_error_text(error)}", f"exception handed back to the caller: {_error_text(error)}"))
    assert run["pool_calls"], t(f"进程池没有收到任何任务：{_error_text(error)}",
                                f"the pool received no work: {_error_text(error)}")
    wanted = "batch failed: worker process lost"
    assert any(wanted in line for line in printed), t(
        f"没有打印 {wanted!r}：在 verify_process.py 里 except BrokenProcessPool 时报告整批失败。",
        f"{wanted!r} was not printed: in verify_process.py, report the whole batch as failed in "
        "except BrokenProcessPool.")
    assert error is not None, t(
        "打印之后异常被吞掉了，调用者会以为这一批成功（退出码 0）：打印后用裸 raise 交回。",
        "the exception was swallowed after the message, so a caller sees success (exit code 0): "
        "re-raise it with a bare raise after printing.")
    assert error["bpp"], t(
        f"交回的是 {error['type']}，不是 BrokenProcessPool：用裸 raise 原样交回，调用者才能分辨原因。",
        f"{error['type']} came back instead of BrokenProcessPool: re-raise it unchanged with a bare raise "
        "so the caller can tell what happened.")
    done = [line for line in printed if TIMING.match(line) and line.lower().startswith("process")]
    assert not done, t("工作进程丢失后仍打印了 process 耗时。",
                       "the process timing was printed although a worker was lost.")


# ---------------------------------------------------------------- 06.6

def _one_size(run: dict, rounds) -> tuple[list, list]:
    """(serial calls, pool calls) of one rounds value, each as [input key, result], in call order."""
    serial = [[key, value] for key, value, *_ in run["serial"] if key[2] == rounds]
    results = {index: value for index, value, _ in run["pool_results"]}
    pool = [[key, results.get(index, "<no result>")] for index, key in enumerate(run["pool_calls"]) if key[2] == rounds]
    return serial, pool


def check_exercise(c, probes: Probes) -> None:
    runs = [("python process_export.py", probes.script("process_export.py", "real")),
            ("python process_export.py 10", probes.script("process_export.py", "real", "10"))]
    attach(c, lambda: [serial_and_pool(run, t(f"串行与进程池：{label}", f"serial and pool: {label}"))
                       for label, run in runs if run["serial"] or run.get("worker_calls")])
    for label, run in runs:
        serial_rounds, pool_rounds = _rounds_seen(run)
        c.note(t(f"{label}：串行 rounds {sorted(serial_rounds, key=str)}，进程池 rounds {sorted(pool_rounds, key=str)}"
                 + (f"，结束于 {_error_text(run['error'])}" if run["error"] else ""),
                 f"{label}: serial rounds {sorted(serial_rounds, key=str)}, pool rounds {sorted(pool_rounds, key=str)}"
                 + (f", ended with {_error_text(run['error'])}" if run["error"] else "")))
    if not any(ROUNDS_EXERCISE[0] in side for _, run in runs for side in _rounds_seen(run)):
        c.skip(t(f"两次运行都没有出现 rounds={ROUNDS_EXERCISE[0]}：练习未做（把 rounds 分别设为 10 和 2000，比较两次；"
                 "例如 python process_export.py 10 用 10，不带参数用 2000，或在一次运行里依次跑两种）",
                 f"neither run used rounds={ROUNDS_EXERCISE[0]}: exercise not attempted (set rounds to 10 and to 2000 "
                 "and compare; e.g. python process_export.py 10 runs 10 and no argument runs 2000, or one run does "
                 "both in turn)"))
    measured = {}
    for rounds in ROUNDS_EXERCISE:
        both = [(label, run) for label, run in runs if all(rounds in side for side in _rounds_seen(run))]
        assert both, t(
            f"没有哪次运行在串行和进程池两边都用了 rounds={rounds}：两次比较只改 rounds，且两边一起改。",
            f"no run used rounds={rounds} on both the serial and the pool side: between the two sizes change only "
            "rounds, and on both sides.")
        label, run = both[0]
        if run["error"]:
            _error_notes(c, run["error"])
        assert run["error"] is None, t(f"{label}（rounds={rounds}）失败：{_error_text(run['error'])}",
                                       f"{label} (rounds={rounds}) failed: {_error_text(run['error'])}")
        serial, pool = _one_size(run, rounds)
        assert [key for key, _ in serial] == [key for key, _ in pool], t(
            f"rounds={rounds} 时两边的输入不同（串行 {len(serial)} 次调用，进程池 {len(pool)} 次）：输入和进程数保持一致，只改 rounds。",
            f"with rounds={rounds} the two sides got different inputs (serial {len(serial)} call(s), pool "
            f"{len(pool)}): keep the inputs and the workers the same, change only rounds.")
        assert [value for _, value in serial] == [value for _, value in pool], t(
            f"rounds={rounds} 时两边结果不一致：串行 {[v for _, v in serial]}，进程池 {[v for _, v in pool]}",
            f"with rounds={rounds} the results differ: serial {[v for _, v in serial]}, pool {[v for _, v in pool]}")
        sizes = len({key[2] for key in run["pool_calls"]} | {entry[0][2] for entry in run["serial"]})
        printed = _timing_lines(run)
        assert printed["serial"] >= sizes and printed["process"] >= sizes, t(
            f"{label} 跑了 {sizes} 种 rounds，却只打印了 {printed['serial']} 行 serial、{printed['process']} 行 process 耗时："
            "每次都要记录两边的耗时。",
            f"{label} ran {sizes} rounds value(s) but printed {printed['serial']} serial and {printed['process']} "
            "process timing line(s): record both timings of each run.")
        measured[rounds] = label
        c.note(t(f"rounds={rounds}（{label}）：两边输入相同、结果一致，耗时已打印",
                 f"rounds={rounds} ({label}): same inputs on both sides, equal results, timings printed"))


if __name__ == "__main__":
    LOGS.mkdir(parents=True, exist_ok=True)
    run_checks(checks())
