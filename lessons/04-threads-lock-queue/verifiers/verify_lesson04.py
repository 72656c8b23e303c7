"""Verifier for lesson 04: two consumer threads, a bounded Queue and a short lock.

04.1  20 ids end as done 19 / failed 1, and errors is exactly [(7, "ValueError")]
04.2  pending.join() returns and both consumers exit; `python threaded_queue.py` finishes by itself
04.3  the simulated work runs outside mutex: two threads take clearly less wall time than the
      sum of their sleeps, and no sleep starts while its thread holds the lock
04.4  exercise: with capacity 1 and 0.2 s per id, the producer's put() is measured to wait

Each check loads a fresh copy of threaded_queue.py (module level only defines the queue, lock,
counters and consume(); the demo sits under `if __name__ == "__main__"`), then drives consume()
with its own producer.  The learner's own main block runs once, as a subprocess, in 04.2.
Instrumentation replaces module globals: `time` (to time and count the sleeps), `mutex` (to know
which thread holds it) and, for the exercise, `pending` (a capacity-1 queue).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import threading
import time
from pathlib import Path
from queue import Full, Queue

from shared.i18n import t
from shared.proc import WaitTimeout, run_python, wait_until

HERE = Path.cwd()
SCRIPT = "threaded_queue.py"
IDS = 20
WORKERS = 2


def load():
    """A fresh module object: its counters start at zero whatever an earlier check did."""
    path = HERE / SCRIPT
    assert path.exists(), t(f"缺少 {SCRIPT}（第 1 步）", f"{SCRIPT} is missing (step 1)")
    spec = importlib.util.spec_from_file_location("threaded_queue", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [name for name in ("pending", "mutex", "counts", "errors", "consume") if not hasattr(module, name)]
    assert not missing, t(f"{SCRIPT} 缺少模块级名字：{', '.join(missing)}",
                          f"{SCRIPT} lacks the module-level names: {', '.join(missing)}")
    return module


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
    """Replaces the module's `time`: counts and times every sleep, passes everything else through."""

    def __init__(self, lock: TrackedLock | None = None, at_least: float = 0.0):
        self.lock, self.at_least = lock, at_least
        self.calls = self.active = self.max_active = self.in_lock = 0
        self.total = 0.0
        self._guard = threading.Lock()

    def sleep(self, seconds):
        seconds = max(float(seconds), self.at_least)
        with self._guard:
            self.calls += 1
            self.total += seconds
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            if self.lock is not None and self.lock.held_here():
                self.in_lock += 1
        try:
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


class Consumers:
    """WORKERS threads running the learner's consume(), fed by the verifier's own producer.

    Daemon threads: a consumer that never returns must not keep the verifier alive.
    """

    def __init__(self, module):
        self.module = module
        self.crashes: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True, name=f"consumer-{n}")
                        for n in range(WORKERS)]
        for thread in self.threads:
            thread.start()

    def _run(self):
        try:
            self.module.consume()
        except BaseException as exc:  # an exception escaping consume() kills the thread: report it
            self.crashes.append(f"{type(exc).__name__}: {exc}")

    def produce(self, ids) -> list[float]:
        """Put each id (bounded), return how long each put() waited."""
        waits = []
        for item in ids:
            started = time.perf_counter()
            try:
                self.module.pending.put(item, timeout=15)
            except Full:
                raise AssertionError(t(
                    f"队列满了 15 秒没人取走编号 {item}：消费者已停止取数。{self.crash_text()}",
                    f"the queue stayed full for 15 s at id {item}: the consumers stopped taking ids. "
                    f"{self.crash_text()}")) from None
            waits.append(time.perf_counter() - started)
        return waits

    def send_stops(self) -> None:
        self.produce([None] * WORKERS)

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self.threads)

    def wait_exit(self, timeout: float) -> bool:
        try:
            wait_until(lambda: self.alive() == 0, timeout, "consumers to exit", interval=0.01)
            return True
        except WaitTimeout:
            return False

    def crash_text(self) -> str:
        return t(f"消费线程异常：{self.crashes}", f"consumer crashed: {self.crashes}") if self.crashes else ""


def wait_all_counted(module, consumers: Consumers, timeout: float) -> float:
    """Wait until done + failed reaches IDS; return the monotonic time it did."""
    try:
        wait_until(lambda: total(module.counts) >= IDS, timeout, "done + failed to reach 20", interval=0.005)
    except WaitTimeout:
        raise AssertionError(t(
            f"{timeout:g} 秒内 done+failed 没到 {IDS}：counts={module.counts}。每个编号都要计入成功或失败。"
            f"{consumers.crash_text()}",
            f"done + failed did not reach {IDS} within {timeout:g} s: counts={module.counts}. Every id must end "
            f"as done or failed. {consumers.crash_text()}")) from None
    return time.monotonic()


# ---------------------------------------------------------------- 04.1

def check_counts(c) -> None:
    module = load()
    consumers = Consumers(module)
    consumers.produce(range(IDS))
    wait_all_counted(module, consumers, timeout=10)
    consumers.send_stops()
    consumers.wait_exit(3)  # 04.2 judges the exit; here it only lets late increments land
    with module.mutex:
        counts, errors = dict(module.counts), list(module.errors)
    c.note(f"counts={counts} errors={errors}")
    assert not consumers.crashes, consumers.crash_text()
    assert counts.get("done") == IDS - 1 and counts.get("failed") == 1, t(
        f"应为 done 19、failed 1，实际 {counts}：编号 7 只能记失败，其他 19 个记成功",
        f"expected done 19 and failed 1, got {counts}: id 7 counts as failed only, the other 19 as done")
    as_tuples = [tuple(entry) if isinstance(entry, (list, tuple)) else entry for entry in errors]
    assert as_tuples == [(7, "ValueError")], t(
        f"errors 应正好是 [(7, 'ValueError')]（编号与异常类名），实际 {errors!r}",
        f"errors should be exactly [(7, 'ValueError')] (the id and the exception class name), got {errors!r}")


# ---------------------------------------------------------------- 04.2

def check_join_and_exit(c) -> None:
    module = load()
    consumers = Consumers(module)
    consumers.produce(range(IDS))
    consumers.send_stops()
    exited = consumers.wait_exit(5)
    c.note(t(f"发出 {WORKERS} 个 None 后，存活消费线程 {consumers.alive()} 个",
             f"after {WORKERS} None stop signals, consumers still alive: {consumers.alive()}"))
    assert exited, t(
        f"收到 None 后消费线程 5 秒内没有退出：consume() 读到 None 要 return。{consumers.crash_text()}",
        f"the consumers did not exit within 5 s of their None: consume() must return on None. "
        f"{consumers.crash_text()}")

    # Queue.join() has no timeout: call the real one in a helper thread and bound our wait for it.
    joiner = threading.Thread(target=module.pending.join, daemon=True, name="pending-join")
    joiner.start()
    joiner.join(3)
    unsettled = module.pending.unfinished_tasks
    c.note(f"pending.join(): {'returned' if not joiner.is_alive() else 'still waiting'}; "
           f"unfinished_tasks={unsettled}")
    assert not joiner.is_alive(), t(
        f"所有编号和 None 都已取走，pending.join() 却 3 秒内没返回：还有 {unsettled} 次 get 没有 task_done。"
        "把 task_done 放进 finally，失败和 None 分支也要结清。",
        f"every id and None was taken, yet pending.join() did not return within 3 s: {unsettled} get() calls "
        "never had their task_done(). Put task_done in finally so the failure and None paths settle too.")

    # The learner's own main block: non-daemon threads, so the script ends only if they all return.
    try:
        done = run_python([SCRIPT], cwd=HERE, timeout=8)
    except subprocess.TimeoutExpired as exc:
        partial = (exc.stdout or b"")
        partial = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        raise AssertionError(t(
            f"python {SCRIPT} 8 秒没有结束（已强制停止）：pending.join() 或 thread.join() 一直在等。"
            f"每个线程要有一个 None，每次 get 要有一次 task_done。已有输出：{partial.strip()[-200:]!r}",
            f"python {SCRIPT} did not finish within 8 s (stopped): pending.join() or thread.join() waits "
            f"forever. Send one None per thread and settle every get() with task_done(). Output so far: "
            f"{partial.strip()[-200:]!r}")) from None
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    c.note(f"python {SCRIPT} -> exit {done.returncode}: {lines[-3:]}")
    assert done.returncode == 0, t(
        f"python {SCRIPT} 退出码 {done.returncode}：\n{done.stdout[-600:]}",
        f"python {SCRIPT} exited {done.returncode}:\n{done.stdout[-600:]}")
    printed = None
    for line in lines:
        match = re.search(r"'done':\s*(\d+),\s*'failed':\s*(\d+)", line)
        if match:
            printed = int(match.group(1)) + int(match.group(2))
    assert printed is not None, t(
        f"python {SCRIPT} 没有打印 counts（形如 {{'done': 19, 'failed': 1}}）",
        f"python {SCRIPT} did not print counts (like {{'done': 19, 'failed': 1}})")
    assert printed == IDS, t(
        f"join 之后打印的 done+failed 是 {printed}，不是 {IDS}：join 返回时还有工作没结清",
        f"the counts printed after join add up to {printed}, not {IDS}: join returned before the work settled")


# ---------------------------------------------------------------- 04.3

def check_work_outside_lock(c) -> None:
    module = load()
    lock = TrackedLock()
    module.mutex = lock
    spy = TimeSpy(lock)
    spy.install(module)
    started = time.monotonic()
    consumers = Consumers(module)
    consumers.produce(range(IDS))
    finished = wait_all_counted(module, consumers, timeout=15)
    consumers.send_stops()
    consumers.wait_exit(3)
    wall, serial = finished - started, spy.total
    c.note(t(f"{WORKERS} 个线程处理 {IDS} 个编号：总耗时 {wall:.2f}s，各次 sleep 之和 {serial:.2f}s"
             f"（{spy.calls} 次），最多 {spy.max_active} 个同时在 sleep，持锁 sleep {spy.in_lock} 次",
             f"{WORKERS} threads, {IDS} ids: wall {wall:.2f}s, sleeps add up to {serial:.2f}s ({spy.calls} "
             f"calls), at most {spy.max_active} sleeping at once, {spy.in_lock} sleeps while holding mutex"))
    assert spy.calls >= IDS, t(
        f"每个编号都应调用 time.sleep 模拟耗时，实际只调用了 {spy.calls} 次",
        f"each id should call time.sleep to simulate the work, but it was called {spy.calls} times")
    assert spy.in_lock == 0, t(
        f"{spy.in_lock} 次 sleep 发生在本线程持有 mutex 的时候：耗时工作要放到 with mutex 外，锁里只改计数",
        f"{spy.in_lock} sleeps ran while their thread held mutex: move the slow work out of with mutex and "
        "keep only the counter updates inside")
    # Two threads sleeping side by side need about half the serial sum; holding the lock makes it the
    # whole sum.  0.8 leaves room for a loaded machine and still tells the two apart.
    assert wall <= 0.8 * serial, t(
        f"总耗时 {wall:.2f}s 没有明显小于串行之和 {serial:.2f}s：两个线程没有并行等待（是否在锁里阻塞？）",
        f"the wall time {wall:.2f}s is not clearly below the serial sum {serial:.2f}s: the two threads did not "
        "wait side by side (blocking inside the lock?)")


# ---------------------------------------------------------------- 04.4

def check_put_waits(c) -> None:
    module = load()
    own = getattr(module.pending, "maxsize", 0)
    assert own > 0, t(
        f"pending 的 maxsize 是 {own}：queue.Queue 的 0（或不填）表示不限容量，put 永远不会等待，"
        "也就没有背压。练习要把容量真的设成 1。",
        f"pending has maxsize {own}: for queue.Queue, 0 (or nothing) means unbounded, so put() never waits and "
        "there is no back-pressure. The exercise needs a real capacity of 1.")
    # The exercise's setting, applied by the verifier: capacity 1 and at least 0.2 s per id.
    module.pending = Queue(maxsize=1)
    TimeSpy(at_least=0.2).install(module)
    consumers = Consumers(module)
    waits = consumers.produce(range(IDS))
    wait_all_counted(module, consumers, timeout=15)
    consumers.send_stops()
    exited = consumers.wait_exit(5)
    blocked = [w for w in waits if w >= 0.05]
    c.note(t(f"你的容量 {own}；验证时改为 1、每条 0.2s：{IDS} 次 put 中 {len(blocked)} 次等待 ≥0.05s，"
             f"最长 {max(waits):.2f}s，合计 {sum(waits):.2f}s；counts={module.counts}",
             f"your capacity {own}; checked with 1 and 0.2 s per id: {len(blocked)} of {IDS} puts waited "
             f">=0.05 s, longest {max(waits):.2f}s, total {sum(waits):.2f}s; counts={module.counts}"))
    # Two consumers free a slot about every 0.1 s, so the 20 puts wait about 1.8 s in all;
    # without back-pressure they would not wait at all.  Ask for less than half of that.
    assert sum(waits) >= 0.8 and len(blocked) >= 5, t(
        f"容量 1、每条 0.2 秒时 put 合计只等了 {sum(waits):.2f}s（{len(blocked)} 次）：生产者应被满队列挡住（背压）",
        f"with capacity 1 and 0.2 s per id the puts waited only {sum(waits):.2f}s in all ({len(blocked)} "
        "times): a full queue should hold the producer back (back-pressure)")
    assert exited, t(
        f"容量 1 时全部 {IDS} 项已结清，但收到 None 后还有 {consumers.alive()} 个线程没退出",
        f"with capacity 1 all {IDS} ids settled, but {consumers.alive()} threads did not exit after their None")


def main(tap) -> None:
    with tap.check("04.1") as c:
        c.skip_unless_selected()
        check_counts(c)
    with tap.check("04.2") as c:
        c.skip_unless_selected()
        check_join_and_exit(c)
    with tap.check("04.3") as c:
        c.skip_unless_selected()
        check_work_outside_lock(c)
    with tap.check("04.4") as c:
        c.skip_unless_selected()
        check_put_waits(c)


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
