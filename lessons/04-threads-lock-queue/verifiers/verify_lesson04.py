"""Verifier for lesson 04: two consumer threads, a bounded Queue and a short lock.

04.1  20 ids end as done 19 / failed 1, and errors is exactly [(7, "ValueError")]
04.2  pending.join() returns and both consumers exit; `python threaded_queue.py` finishes by itself
04.3  the simulated work runs outside mutex: no sleep starts while its thread holds the lock, and the
      two threads are seen sleeping at the same time (each one's first sleep waits at a barrier that
      only opens when the other thread sleeps too)
04.4  exercise (the course's): the learner's own pending has capacity 1 and consume() waits 0.2 s per id;
      then the producer's put() finds that queue full and waits, and all 20 ids still settle.  Neither
      change made = not attempted

Each check loads a fresh copy of threaded_queue.py (module level only defines the queue, lock,
counters and consume(); the demo sits under `if __name__ == "__main__"`), then drives consume()
with its own producer.  The learner's own main block runs once, as a subprocess, in 04.2.
Instrumentation replaces module globals: `time` (to count the sleeps and note the seconds asked for),
`mutex` (to know which thread holds it) and, for the exercise, `pending` (a view of the learner's own queue
that counts the puts that found it full).

Nothing is judged by the clock.  A hang is proved from the threads' stacks (lab04_stuck.py): a thread
waiting in get() on an empty queue that nobody will fill, in join() for a task_done() nobody will call.
Wall times appear as evidence only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import subprocess
import threading
import time
from pathlib import Path
from queue import Queue

from lab04_stuck import STUCK_EXIT, STUCK_MARK, deadlocked
from shared.i18n import t
from shared.proc import WaitTimeout, run_python, wait_until

HERE = Path.cwd()
SCRIPT = "threaded_queue.py"
IDS = 20
WORKERS = 2
BOUND = 30.0  # backstop for waits that facts normally end in well under a second
MEET_BOUND = 15.0  # 04.3's barrier gives up after this (shorter than BOUND, so the producer outlasts it)


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
    """Replaces the module's `time`: counts and times every sleep, passes everything else through.

    meet=True: the first sleep of each thread that does not hold the lock waits at a barrier for
    the other thread's first such sleep -- the two threads are then sleeping at the same time, a
    fact that no timing can fake.  before_sleep: an Event every sleep waits for first (04.4's gate)."""

    def __init__(self, lock: TrackedLock | None = None, at_least: float = 0.0, meet: bool = False,
                 before_sleep: threading.Event | None = None):
        self.lock, self.at_least, self.before_sleep = lock, at_least, before_sleep
        self.calls = self.active = self.max_active = self.in_lock = 0
        self.total = self.asked = 0.0  # seconds slept; seconds the module asked for
        self._guard = threading.Lock()
        self.barrier = threading.Barrier(WORKERS, timeout=MEET_BOUND) if meet else None
        self.met = False  # the barrier opened: WORKERS threads were sleeping at once
        self._arrived: set[int] = set()

    def sleep(self, seconds):
        asked = float(seconds)
        seconds = max(asked, self.at_least)
        holding = self.lock is not None and self.lock.held_here()
        with self._guard:
            self.calls += 1
            self.asked += asked
            self.total += seconds
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.in_lock += holding
            first = threading.get_ident() not in self._arrived
            self._arrived.add(threading.get_ident())
        try:
            if self.barrier is not None and first and not holding:
                try:
                    self.barrier.wait()
                    self.met = True
                except threading.BrokenBarrierError:
                    pass  # the other thread never slept outside the lock: 04.3 says so
            if self.before_sleep is not None:
                self.before_sleep.wait(BOUND)
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


class CountingQueue:
    """The learner's own pending queue, seen through a view that notes every put() finding it full, i.e.
    every put that must wait.  consume() looks `pending` up at call time, so it uses the view too."""

    def __init__(self, queue: Queue):
        self.queue = queue
        self.found_full = 0
        self.held_back = threading.Event()

    def put(self, item, block=True, timeout=None):
        if self.queue.full():
            self.found_full += 1
            self.held_back.set()
        self.queue.put(item, block, timeout)

    def __getattr__(self, name):
        return getattr(self.queue, name)


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
        """Put each id from a producer thread; return how long each put() waited (evidence only).
        A put that can never finish (a full queue and no consumer able to take) fails the check."""
        waits: list[float] = []

        def run():
            for item in ids:
                started = time.perf_counter()
                self.module.pending.put(item)
                waits.append(time.perf_counter() - started)

        producer = threading.Thread(target=run, daemon=True, name="producer")
        producer.start()
        stuck: dict = {}

        def finished():
            if not producer.is_alive():
                return True
            stuck.update(deadlocked([producer, *self.threads]) or {})
            return bool(stuck)

        with contextlib.suppress(WaitTimeout):
            wait_until(finished, BOUND, "the producer to put every id", interval=0.005)
        assert not producer.is_alive(), t(
            f"生产者放不完编号：{where(stuck) or '仍在等待'}。{self.crash_text()}",
            f"the producer cannot put every id: {where(stuck) or 'still waiting'}. {self.crash_text()}")
        return waits

    def send_stops(self) -> None:
        self.produce([None] * WORKERS)

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self.threads)

    def wait_exit(self) -> dict[str, str] | None:
        """Wait until every consumer has returned (None), or until those left are proved to wait
        forever (where each waits).  Call it once nothing more will be put."""
        found: dict = {}

        def settled():
            if not self.alive():
                return True
            found.update(deadlocked(self.threads) or {})
            return bool(found)

        try:
            wait_until(settled, BOUND, "consumers to exit", interval=0.01)
        except WaitTimeout:
            found = {th.name: "still running" for th in self.threads if th.is_alive()}
        return found or None

    def crash_text(self) -> str:
        return t(f"消费线程异常：{self.crashes}", f"consumer crashed: {self.crashes}") if self.crashes else ""


def where(stuck: dict[str, str] | None) -> str:
    return "; ".join(f"{name} {what}" for name, what in (stuck or {}).items())


def wait_all_counted(module, consumers: Consumers) -> float:
    """Wait until done + failed reaches IDS; return the monotonic time it did."""
    try:
        wait_until(lambda: total(module.counts) >= IDS or not consumers.alive()
                   or deadlocked(consumers.threads), BOUND, "done + failed to reach 20", interval=0.005)
    except WaitTimeout:
        pass
    assert total(module.counts) >= IDS, t(
        f"done+failed 没到 {IDS}：counts={module.counts}。每个编号都要计入成功或失败。{consumers.crash_text()}",
        f"done + failed did not reach {IDS}: counts={module.counts}. Every id must end as done or failed. "
        f"{consumers.crash_text()}")
    return time.monotonic()


# ---------------------------------------------------------------- 04.1

def check_counts(c) -> None:
    module = load()
    consumers = Consumers(module)
    consumers.produce(range(IDS))
    wait_all_counted(module, consumers)
    consumers.send_stops()
    consumers.wait_exit()  # 04.2 judges the exit; here it makes sure no late increment is still to come
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
    stuck = consumers.wait_exit()
    c.note(t(f"发出 {WORKERS} 个 None 后，存活消费线程 {consumers.alive()} 个" + (f"：{where(stuck)}" if stuck else ""),
             f"after {WORKERS} None stop signals, consumers still alive: {consumers.alive()}"
             + (f": {where(stuck)}" if stuck else "")))
    assert not stuck, t(
        f"收到 None 后消费线程没有退出（{where(stuck)}）：consume() 读到 None 要 return。{consumers.crash_text()}",
        f"the consumers did not exit after their None ({where(stuck)}): consume() must return on None. "
        f"{consumers.crash_text()}")

    # Every consumer has returned: a get() that was not settled by now never will be, and Queue.join()
    # (which has no timeout) would wait for it forever.
    unsettled = module.pending.unfinished_tasks
    c.note(t(f"两个消费线程都返回后 pending.unfinished_tasks={unsettled}",
             f"pending.unfinished_tasks={unsettled} once both consumers had returned"))
    assert unsettled == 0, t(
        f"所有编号和 None 都已取走、消费线程都已退出，还有 {unsettled} 次 get 没有 task_done：pending.join() 会永远等下去。"
        "把 task_done 放进 finally，失败和 None 分支也要结清。",
        f"every id and None was taken and both consumers returned, yet {unsettled} get() calls never had their "
        "task_done(): pending.join() would wait forever. Put task_done in finally so the failure and None paths "
        "settle too.")
    joiner = threading.Thread(target=module.pending.join, daemon=True, name="pending-join")
    joiner.start()
    joiner.join(BOUND)
    assert not joiner.is_alive(), t("pending.join() 没有返回", "pending.join() did not return")

    # The learner's own main block, under a watchdog: non-daemon threads, so the script ends only if
    # they all return; if they deadlock, the watchdog says where each one waits.
    try:
        done = run_python(["lab04_stuck.py", SCRIPT], cwd=HERE, timeout=BOUND)
    except subprocess.TimeoutExpired as exc:
        partial = (exc.stdout or b"")
        partial = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        raise AssertionError(t(
            f"python {SCRIPT} {BOUND:g} 秒没有结束（已强制停止）。已有输出：{partial.strip()[-200:]!r}",
            f"python {SCRIPT} did not finish within {BOUND:g} s (stopped). Output so far: "
            f"{partial.strip()[-200:]!r}")) from None
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    found = [line[len(STUCK_MARK):] for line in lines if line.startswith(STUCK_MARK)]
    if done.returncode == STUCK_EXIT and found:
        stuck = json.loads(found[-1])
        raise AssertionError(t(
            f"python {SCRIPT} 永远不会结束：{where(stuck)}。每个线程要有一个 None，每次 get 要有一次 task_done。",
            f"python {SCRIPT} never ends: {where(stuck)}. Send one None per thread and settle every get() with "
            "task_done()."))
    c.note(t(f"python {SCRIPT} -> 退出码 {done.returncode}：{lines[-3:]}", f"python {SCRIPT} -> exit {done.returncode}: {lines[-3:]}"))
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
    spy = TimeSpy(lock, meet=True)
    spy.install(module)
    started = time.monotonic()
    consumers = Consumers(module)
    consumers.produce(range(IDS))
    finished = wait_all_counted(module, consumers)
    consumers.send_stops()
    consumers.wait_exit()
    wall, serial = finished - started, spy.total
    c.note(t(f"{WORKERS} 个线程处理 {IDS} 个编号：{spy.calls} 次 sleep，持锁 sleep {spy.in_lock} 次，"
             f"两个线程{'确实同时在 sleep（各自第一次 sleep 在屏障处会合）' if spy.met else '从未同时 sleep'}",
             f"{WORKERS} threads, {IDS} ids: {spy.calls} sleeps, {spy.in_lock} while holding mutex; the two threads "
             f"{'were sleeping at the same time (their first sleeps met at a barrier)' if spy.met else 'never slept at the same time'}"))
    c.note(t(f"耗时仅作记录：总 {wall:.2f}s，各次 sleep 之和 {serial:.2f}s",
             f"timings, recorded only: wall {wall:.2f}s, sleeps add up to {serial:.2f}s"))
    assert spy.calls >= IDS, t(
        f"每个编号都应调用 time.sleep 模拟耗时，实际只调用了 {spy.calls} 次",
        f"each id should call time.sleep to simulate the work, but it was called {spy.calls} times")
    assert spy.in_lock == 0, t(
        f"{spy.in_lock} 次 sleep 发生在本线程持有 mutex 的时候：耗时工作要放到 with mutex 外，锁里只改计数",
        f"{spy.in_lock} sleeps ran while their thread held mutex: move the slow work out of with mutex and "
        "keep only the counter updates inside")
    assert spy.met, t(
        "两个线程从未同时处在 sleep 中：第一个线程的 sleep 等另一个线程也进入 sleep，却没有等到（是否在别的锁里阻塞？）",
        "the two threads were never sleeping at the same time: the first thread's sleep waited for the other "
        "thread to sleep too, in vain (blocking inside another lock?)")


# ---------------------------------------------------------------- 04.4

def check_put_waits(c) -> None:
    module = load()
    own = getattr(module.pending, "maxsize", 0)
    pending = module.pending = CountingQueue(module.pending)
    # With the exercise's capacity, each consumer's sleep begins only once a put has found the queue full,
    # so back-pressure is certain however the threads are scheduled.  Any other capacity is judged by the
    # numbers alone, so nothing waits for a put that may never find the queue full.
    spy = TimeSpy(before_sleep=pending.held_back if own == 1 else None)
    spy.install(module)
    consumers = Consumers(module)
    waits = consumers.produce(range(IDS))
    held_back = pending.found_full
    wait_all_counted(module, consumers)
    consumers.send_stops()
    stuck = consumers.wait_exit()
    per_id = spy.asked / IDS
    c.note(t(f"你的 pending 容量 {own}；consume() 每个编号等待 {per_id:.2f}s（time.sleep 共 {spy.calls} 次）",
             f"your pending holds {own}; consume() waits {per_id:.2f}s per id ({spy.calls} time.sleep calls)"))
    if own != 1 and per_id < 0.2 - 1e-9:
        c.skip(t(f"pending 容量仍是 {own}、每个编号仍等 {per_id:.2f}s：练习未做（容量改成 1，消费者每条等待 0.2 秒）",
                 f"pending still holds {own} and each id still waits {per_id:.2f}s: exercise not attempted "
                 "(capacity 1, and the consumers wait 0.2 s per id)"))
    assert own == 1, t(
        f"pending 的容量是 {own}，练习要改成 1" + ("（queue.Queue 的 0 表示不限容量：put 永远不会等待，没有背压）" if own <= 0 else ""),
        f"pending holds {own}; the exercise sets its capacity to 1"
        + (" (for queue.Queue, 0 means unbounded: put() never waits, so there is no back-pressure)" if own <= 0 else ""))
    assert per_id >= 0.2 - 1e-9, t(f"consume() 每个编号只等 {per_id:.2f}s，练习要每条等待 0.2 秒",
                                   f"consume() waits only {per_id:.2f}s per id; the exercise makes it 0.2 s")
    c.note(t(f"{IDS} 次 put 中 {held_back} 次遇到满队列而等待，最长 {max(waits):.2f}s，合计 {sum(waits):.2f}s"
             f"（只作记录）；counts={module.counts}",
             f"{held_back} of {IDS} puts found the queue full and waited, longest {max(waits):.2f}s, total "
             f"{sum(waits):.2f}s (recorded only); counts={module.counts}"))
    assert held_back >= 1, t(
        "容量 1 时没有一次 put 遇到满队列：生产者应被满队列挡住（背压）",
        "with capacity 1 no put ever found the queue full: a full queue should hold the producer back "
        "(back-pressure)")
    assert not stuck, t(
        f"容量 1 时全部 {IDS} 项已结清，但收到 None 后线程没退出：{where(stuck)}",
        f"with capacity 1 all {IDS} ids settled, but threads did not exit after their None: {where(stuck)}")


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
