"""Verifier for lesson 09: late acks, redelivery, and output that is safe to produce twice.

09.1  python duplicate_export.py passes; two more messages with different ids and one job_id
      return the same path and sha256, and that digest is the file's
09.2  while eight deliveries of one large snapshot rewrite artifacts/<job>.json, a reader thread
      never gets a partial file and inotify shows the name only ever replaced (no in-place write);
      a delivery whose os.replace fails leaves no temp file behind
09.3  the running worker answers `inspect conf` with task_acks_late, task_reject_on_worker_lost,
      worker_prefetch_multiplier 1 and visibility_timeout 60 in all three places
09.4  redelivery drill: a worker of ours (the learner's app through lab09_drill.py) pauses the first
      execution right after os.replace; its pool child — found from the worker's PID and
      `inspect active` — gets SIGKILL; the message comes back (redelivered), runs again, and the final
      file is complete with the digest it had when the child died
09.5  exercise: one job_id delivered with snapshot A, then with snapshot B: the file is complete and
      equals exactly one of them (the last finisher's) — os.replace does not choose business versions

The declared worker (tasks.json) serves 09.1–09.3 and 09.5; 09.4 uses its own worker on a private
queue and stops it by its PID.  The learner's modules never load here (the judge): messages are sent with
export_products, results waited on and workers asked through the learner's app in a probe
(lab09_learner.py through shared/probe.py), which reports what happened; the checks decide.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path
from uuid import uuid4

from shared import handshake
from shared.celerylab import (LOG_DIR, WORK, DeclaredWorker, children_of, log_lines, read_events, redact, short,
                              start_worker, with_nodename)
from shared.figures import attach, bar, lane, lanes, mark
from shared.i18n import t
from shared.probe import Probe
from shared.proc import WaitTimeout, run_python, wait_until
from shared.tap import Check, run

ARTIFACTS = WORK / "artifacts"
VISIBILITY = 60
TERMINAL = ("SUCCESS", "FAILURE", "REVOKED")
REPLY_SECONDS = 45  # bound on getting one worker's control reply; a pass takes milliseconds
WORKER: DeclaredWorker | None = None  # the worker the runner declared (tasks.json): read in main, before the checks
NO_WORKER = ""  # why there is none: each check that needs the worker fails with this
RESULT_MARGIN = 15  # seconds a probe call may take beyond the wait it was asked for
learner = Probe(verifiers=Path(__file__).resolve().parent)  # the learner's modules load there, never here


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the lesson's Redis and the worker the runner
    started; 09.3 and 09.4 ask for it (declared_worker()), 09.4 also runs a worker of its own."""
    return [
        Check("09.1", check_duplicate, "worker; python duplicate_export.py"),
        Check("09.2", check_atomic, "worker; a reader thread; inotify"),
        Check("09.3", lambda c: check_config(c, declared_worker()), "worker; celery inspect conf"),
        Check("09.4", lambda c: check_redelivery(c, declared_worker()), "our lab09_drill.py worker, child killed"),
        Check("09.5", check_versions, "worker"),
    ]


def declared_worker() -> DeclaredWorker:
    """The declared worker, asked for inside a check that needs it: without one that check fails, saying why."""
    assert WORKER, NO_WORKER
    return WORKER


def _import() -> None:
    """celery_app (with its app) and export_tasks (with export_products) load in the probe."""
    learner.module("celery_app", values=("app",))
    learner.module("export_tasks", "export_products")


def _send(job_id: str, rows: list[dict], task_id: str, queue: str | None = None) -> str:
    """export_products.apply_async(args=[job_id, rows], task_id=task_id[, queue=queue]), in the probe."""
    return learner.call("lab09_learner:send", job_id, rows, task_id, queue)


def _state(task_id: str) -> str:
    return learner.call("lab09_learner:state", task_id)


def _ask(node: str, method: str, **arguments):
    """One worker's reply to a control command (inspect conf, active …), asked again until it answers
    (bounded).  A broadcast sent before the worker's control channel is subscribed is dropped, not queued
    (right after `ready.` that can happen), so one unanswered broadcast proves nothing."""
    def reply():
        answers = learner.call("lab09_learner:control", node, method, arguments) or {}
        return (answers[node],) if node in answers else None  # wrapped: the reply itself may be empty
    try:
        return wait_until(reply, REPLY_SECONDS, f"{node} to answer inspect {method}", interval=0.1)[0]
    except WaitTimeout:
        raise AssertionError(t(f"worker {node} 在 {REPLY_SECONDS} 秒内没有回答 inspect {method}",
                               f"worker {node} did not answer inspect {method} within {REPLY_SECONDS} s")) from None


def _rows(count: int, tag: str) -> list[dict]:
    return [{"id": n, "name": f"{tag} 商品 {n:04d}", "description": "重复交付实验 / duplicate delivery drill " * 2,
             "is_active": n % 3 != 0, "price_cents": n * 125} for n in range(1, count + 1)]


def _get(task_id: str, seconds: float = 20):
    """AsyncResult(task_id).get(timeout=seconds) in the probe: the value; what it raised fails the check."""
    try:
        return learner.call("lab09_learner:result", task_id, seconds, timeout=seconds + RESULT_MARGIN)
    except Exception as exc:  # noqa: BLE001
        why = redact(f"{type(exc).__name__}: {exc}")
        raise AssertionError(t(f"任务 {task_id} 没有成功：{why}",
                               f"task {task_id} did not succeed: {why}")) from None


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- inotify (Linux; WSL2 included)

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x8, 0x40, 0x80, 0x100, 0x200
WRITE_IN_PLACE = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE


class DirWatch:
    """Every create/write/rename event in one folder, by file name, collected in a thread."""

    def __init__(self, folder: Path):
        self.events: list[tuple[str, int]] = []
        self.halt = threading.Event()
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(folder), IN_MODIFY | IN_CLOSE_WRITE |
                                                 IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE) < 0:
            raise OSError(ctypes.get_errno(), "inotify is not available")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        offset = 0
        while offset + 16 <= len(data):
            _, mask, _, size = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16: offset + 16 + size].rstrip(b"\0").decode(errors="replace")
            self.events.append((name, mask))
            offset += 16 + size

    def _run(self) -> None:
        while not self.halt.is_set():
            if select.select([self.fd], [], [], 0.05)[0]:
                self._drain()

    def close(self) -> None:
        self.halt.set()
        self.thread.join(timeout=2)
        self._drain()
        os.close(self.fd)

    def masks(self, name: str) -> int:
        mask = 0
        for event_name, event_mask in self.events:
            if event_name == name:
                mask |= event_mask
        return mask


class Reader(threading.Thread):
    """Reads one file over and over, as a downstream consumer would, and sorts what it saw."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.complete, self.partial, self.absent = path, 0, [], 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                self.absent += 1
                continue
            try:
                json.loads(data)
                self.complete += 1
            except ValueError:
                self.partial.append(len(data))

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=5)


# ---------------------------------------------------------------- 09.1

def check_duplicate(c) -> None:
    try:
        done = run_python(["duplicate_export.py"], cwd=WORK, timeout=40)
    except subprocess.TimeoutExpired:
        raise AssertionError(t("duplicate_export.py 40 秒内没有结束",
                               "duplicate_export.py did not finish within 40 s")) from None
    c.note(t(f"python duplicate_export.py → 退出码 {done.returncode}",
             f"python duplicate_export.py → exit code {done.returncode}"))
    for line in done.stdout.splitlines()[-4:]:
        c.note("  " + redact(line)[:240])
    assert done.returncode == 0 and "same logical output" in done.stdout, t(
        "duplicate_export.py 没有打印 same logical output（见上方输出）",
        "duplicate_export.py did not print same logical output (see the output above)")

    _import()
    job_id = str(uuid4())
    rows = _rows(3, "dup")
    # The same snapshot as another producer may build it: equal rows, keys in another order.
    reordered = [dict(reversed(list(row.items()))) for row in rows]
    first = _send(job_id, rows, str(uuid4()))
    second = _send(job_id, reordered, str(uuid4()))
    a, b = _get(first), _get(second)
    c.note(t(f"同一 job_id {job_id}，两条消息 {short(first)} 与 {short(second)}（同一快照，第二条的字段顺序相反）",
             f"one job_id {job_id}, two messages {short(first)} and {short(second)} (one snapshot; the second lists "
             "each row's fields in reverse order)"))
    c.note(f"  1: path={a.get('path')} sha256={str(a.get('sha256'))[:16]}…")
    c.note(f"  2: path={b.get('path')} sha256={str(b.get('sha256'))[:16]}…")
    assert first != second
    assert a.get("path") == b.get("path"), t(
        f"两次执行的 path 不同（{a.get('path')} / {b.get('path')}）：输出文件名只能由 job_id 决定",
        f"the two executions returned different paths ({a.get('path')} / {b.get('path')}): name the output by job_id "
        "only")
    assert a.get("sha256") and a.get("sha256") == b.get("sha256"), t(
        "两次执行的 sha256 不同：同一快照必须写出相同的字节（json.dumps 要 sort_keys=True，不加时间戳或消息 id）",
        "the two executions returned different sha256: one snapshot must give the same bytes (json.dumps with "
        "sort_keys=True, no timestamp or message id inside)")
    on_disk = _sha(WORK / a["path"])
    assert on_disk == a["sha256"], t(f"文件的 sha256 {on_disk[:16]}… 与返回值不同",
                                     f"the file's sha256 {on_disk[:16]}… differs from the result")
    c.note(t("两次结果相同，且等于文件本身的 sha256", "both results agree and match the file's own sha256"))


# ---------------------------------------------------------------- 09.2

def check_atomic(c) -> None:
    _import()
    ARTIFACTS.mkdir(exist_ok=True)
    job_id = str(uuid4())
    target = ARTIFACTS / f"{job_id}.json"
    rows = _rows(1500, "big")
    before = {p.name for p in ARTIFACTS.iterdir()}
    try:
        watch = DirWatch(ARTIFACTS)
    except OSError as exc:
        watch = None
        c.note(t(f"inotify 不可用（{exc}）：只用读者线程检查",
                 f"inotify unavailable ({exc}): the reader thread alone decides"))
    reader = Reader(target)
    reader.start()
    deliveries = [_send(job_id, rows, str(uuid4())) for _ in range(8)]
    try:
        for delivery in deliveries:
            _get(delivery, 30)
    finally:
        reader.stop()
        if watch:
            watch.close()
    size = target.stat().st_size if target.exists() else 0
    c.note(t(f"{len(deliveries)} 次交付同一 job（{len(rows)} 行，{size // 1024} KiB）；"
             f"读者读取 {reader.complete} 次完整 JSON，{len(reader.partial)} 次不完整",
             f"{len(deliveries)} deliveries of one job ({len(rows)} rows, {size // 1024} KiB); the reader got "
             f"complete JSON {reader.complete} times and a partial file {len(reader.partial)} times"))
    assert not reader.partial, t(
        f"读者读到了不完整的文件（{reader.partial[:3]} 字节）：先写本次独有的临时文件，再 os.replace 到目标名",
        f"the reader saw an incomplete file ({reader.partial[:3]} bytes): write a temp file of this run, then "
        "os.replace it onto the target")
    if watch:
        mask = watch.masks(target.name)
        in_place = [name for bit, name in ((IN_CREATE, "create"), (IN_MODIFY, "write"), (IN_CLOSE_WRITE, "close-write"))
                    if mask & bit]
        c.note(t(f"inotify：{target.name} 上的事件 = {'、'.join(in_place) or '只有 moved-to（整体替换）'}",
                 f"inotify: events on {target.name} = {', '.join(in_place) or 'moved-to only (replaced whole)'}"))
        assert not (mask & WRITE_IN_PLACE), t(
            "目标文件被原地写入（create/write）：读者可能看到半个文件，即使这次没撞上。要写临时文件再 os.replace",
            "the target was written in place (create/write): a reader can see half of it even if this run did not "
            "catch it. Write a temp file and os.replace it")
    try:
        json.loads(target.read_bytes())
    except (OSError, ValueError):
        raise AssertionError(t("最终文件不是完整 JSON", "the final file is not complete JSON")) from None
    left = sorted({p.name for p in ARTIFACTS.iterdir()} - before - {target.name})
    assert not left, t(f"成功之后留下了多余文件：{left}", f"files left behind after success: {left}")

    # A failing delivery: the target name is taken by a directory, so os.replace raises.
    broken_id = str(uuid4())
    blocker = ARTIFACTS / f"{broken_id}.json"
    blocker.mkdir()
    (blocker / "keep").write_text("a directory in the way\n")
    before = {p.name for p in ARTIFACTS.iterdir()}
    try:
        failing = _send(broken_id, rows[:2], str(uuid4()))
        try:
            wait_until(lambda: _state(failing) in TERMINAL, 20, "the failing delivery to end", interval=0.1)
        except WaitTimeout:
            pass
        state = _state(failing)
        left = sorted({p.name for p in ARTIFACTS.iterdir()} - before)
        c.note(t(f"让 os.replace 失败的一次交付 → {state}；留下的文件：{left or '无'}",
                 f"a delivery whose os.replace fails → {state}; files left behind: {left or 'none'}"))
        assert state == "FAILURE", t(f"目标名被目录占用时任务应失败，实际 {state}",
                                     f"with a directory on the target name the task should fail, got {state}")
        assert not left, t(f"失败后留下了临时文件 {left}：在 finally 里删除本次的临时文件",
                           f"the failure left {left} behind: unlink this run's temp file in finally")
    finally:
        for path in sorted(blocker.rglob("*"), reverse=True):
            path.unlink()
        blocker.rmdir()


# ---------------------------------------------------------------- 09.3

def check_config(c, worker: DeclaredWorker) -> None:
    _import()
    assert worker.alive(), t(f"worker（pid {worker.pid}）已退出", f"the worker (pid {worker.pid}) has exited")
    conf = _ask(worker.nodename, "conf", with_defaults=False) or {}
    broker_opts = conf.get("broker_transport_options") or {}
    backend_opts = conf.get("result_backend_transport_options") or {}
    seen = {
        "task_acks_late": conf.get("task_acks_late"),
        "task_reject_on_worker_lost": conf.get("task_reject_on_worker_lost"),
        "worker_prefetch_multiplier": conf.get("worker_prefetch_multiplier", 4),
        "broker_transport_options.visibility_timeout": broker_opts.get("visibility_timeout"),
        "result_backend_transport_options.visibility_timeout": backend_opts.get("visibility_timeout"),
        "visibility_timeout": conf.get("visibility_timeout"),
    }
    c.note(t(f"celery inspect conf -d {worker.nodename}（运行中的 worker 实际使用的配置）：",
             f"celery inspect conf -d {worker.nodename} (what the running worker actually uses):"))
    keys = list(seen)
    c.note("  " + ", ".join(f"{key}={seen[key]!r}" for key in keys[:3]))
    c.note("  visibility_timeout: " + ", ".join(f"{key.split('.')[0]}={seen[key]!r}" for key in keys[3:]))
    interval = broker_opts.get("unacked_restore_interval")
    throttle = broker_opts.get("unacked_restore_throttle")
    if interval is not None or throttle is not None:
        c.note(t(f"  未确认消息回收：每 {interval or 10} 秒检查，每 {throttle or 10} 次真正扫描",
                 f"  unacked restore sweep: every {interval or 10} s, scanning every {throttle or 10} call(s)"))
    else:
        c.note(t("  未确认消息回收：默认约每 100 秒扫描一次（见指南）",
                 "  unacked restore sweep: default, about every 100 s (see the guide)"))
    assert seen["task_acks_late"] is True, t("task_acks_late 不是 True：消息在执行前就被确认了",
                                             "task_acks_late is not True: messages are acked before the work runs")
    assert seen["task_reject_on_worker_lost"] is True, t(
        "task_reject_on_worker_lost 不是 True：子进程丢失时消息会被确认为失败，而不是回到队列",
        "task_reject_on_worker_lost is not True: a lost child acks the message as failed instead of requeueing it")
    assert seen["worker_prefetch_multiplier"] == 1, t(
        f"worker_prefetch_multiplier 是 {seen['worker_prefetch_multiplier']}，应为 1",
        f"worker_prefetch_multiplier is {seen['worker_prefetch_multiplier']}, it should be 1")
    wrong = [key for key in list(seen)[3:] if seen[key] != VISIBILITY]
    assert not wrong, t(f"这些位置的 visibility_timeout 不是 {VISIBILITY}：{wrong}（三处要一致，改完重启 worker）",
                        f"visibility_timeout is not {VISIBILITY} in: {wrong} (all three must agree; restart the "
                        "worker)")


# ---------------------------------------------------------------- 09.4

def drill_timeline(events: list[dict], message_id: str, killed: dict, worker_pid: int) -> dict:
    """A picture of the drill (never a verdict): a lane per pool child (by pid) with a bar per execution of
    our message (start to end as the child recorded them; the killed one ends at the SIGKILL), the pause
    after os.replace, the SIGKILL the verifier sent, and the redelivered execution in the child that
    replaced it."""
    ours = [e for e in events if isinstance(e.get("at"), (int, float)) and isinstance(e.get("pid"), int)]
    pids: list[int] = []
    for e in ours:
        if e.get("kind") == "start" and e.get("task_id") == message_id and e["pid"] not in pids:
            pids.append(e["pid"])
    if killed.get("pid") is not None and killed["pid"] not in pids:
        pids.insert(0, killed["pid"])
    job = message_id[:8]
    rows = []
    for pid in pids:
        mine = [e for e in ours if e["pid"] == pid]
        bars, marks = [], []
        starts = [e for e in mine if e.get("kind") == "start" and e.get("task_id") == message_id]
        for start in starts:
            end = next((e for e in mine if e.get("kind") == "end" and e.get("task_id") == message_id
                        and e["at"] >= start["at"]), None)
            if end is not None:
                stop, state = end["at"], str(end.get("state"))
            elif pid == killed.get("pid") and "at" in killed:
                stop, state = killed["at"], "SIGKILL"
            else:
                stop, state = start["at"], "no end recorded"
            redelivered = bool(start.get("redelivered"))
            bars.append(bar(start["at"], stop, f"{job} {'redelivered' if redelivered else 'first'} run: {state}",
                            "retry" if redelivered else "run"))
        marks += [mark(e["at"], "os.replace, held", "hold") for e in mine if e.get("kind") == "held"]
        marks += [mark(e["at"], "os.replace", "event") for e in mine if e.get("kind") == "replaced"]
        if pid == killed.get("pid") and "at" in killed:
            marks.append(mark(killed["at"], "SIGKILL", "killed"))
        rows.append(lane(f"child {pid}" + (" (killed)" if pid == killed.get("pid") else ""), bars=bars, marks=marks))
    return lanes(t(f"子进程被 SIGKILL，消息 {job}… 重投到另一个子进程",
                   f"a pool child SIGKILLed; message {job}… redelivered to another child"), rows,
                 caption=t(f"演练 worker pid {worker_pid}，并发 1：池用新的子进程替换被杀的子进程",
                           f"drill worker pid {worker_pid}, concurrency 1: the pool replaces the killed child"))


def check_redelivery(c, worker: DeclaredWorker) -> None:
    _import()
    job_id = str(uuid4())
    drill_dir = LOG_DIR / f"drill-{job_id[:8]}"  # this drill's events and handshake files, nobody else's
    drill_dir.mkdir(parents=True)
    events_path = drill_dir / "events.jsonl"
    # A queue of our own: the declared worker never sees this message.  One fixed name, so repeated
    # runs leave no trail of queue bindings in Redis.
    queue = "lab09-drill"
    node = f"lab09drill{os.getpid()}@{worker.nodename.split('@', 1)[-1]}"
    argv = [part if part != "celery_app:app" else "lab09_drill:app" for part in worker.argv]
    argv = with_nodename(argv, node)
    argv = [a for a in argv if not a.startswith("--concurrency")]
    queue_at = argv.index("-Q") if "-Q" in argv else -1
    if queue_at >= 0:
        argv[queue_at + 1] = queue
    else:
        argv += ["-Q", queue]
    argv += ["--concurrency=1"]
    env = dict(os.environ, LAB_DRILL_DIR=str(drill_dir), LAB_DRILL_JOB=job_id)

    def events(kind: str) -> list[dict]:
        return [e for e in read_events(events_path) if e.get("kind") == kind]

    proc = start_worker(argv, "worker-drill.log", env=env)
    message_id = str(uuid4())
    killed: dict = {}  # the SIGKILL, for the figure: which child, when (this process's clock)
    try:
        c.note(t(f"演练 worker：pid {proc.pid}，节点 {node}，私有队列 {queue}，并发 1",
                 f"drill worker: pid {proc.pid}, node {node}, private queue {queue}, concurrency 1"))
        rows = _rows(40, "drill")
        _send(job_id, rows, message_id, queue)
        # Either it reaches os.replace (and is held there), or it ends without ever calling it: a fact
        # as soon as the result is in, so a write-in-place never costs this check its whole bound.
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: events("held") or _state(message_id) in TERMINAL, 30,
                       "the first execution to reach os.replace", interval=0.1)
        if not events("held"):
            state = _state(message_id)
            raise AssertionError(t(
                f"第一次执行没有在 os.replace 处停下（结果状态 {state}）：export_products 要先写临时文件再 "
                "os.replace 到目标名",
                f"the first execution never reached os.replace (state {state}): export_products must write a "
                "temp file and os.replace it onto the target"))
        held = events("held")[0]
        child = held["pid"]
        assert child in children_of(proc.pid), t(f"pid {child} 不是演练 worker {proc.pid} 的子进程，不会杀它",
                                                 f"pid {child} is not a child of drill worker {proc.pid}; not killing "
                                                 "it")
        # The held execution waits for our word (it never comes: the child is killed), so this is no race.
        active = _ask(node, "active") or []
        running = [task for task in active if task.get("id") == message_id]
        assert running and running[0].get("worker_pid") == child, t(
            f"inspect active 没有显示 {message_id} 在子进程 {child} 上运行：{active}",
            f"inspect active does not show {message_id} running in child {child}: {active}")
        c.note(t(f"inspect active：{short(message_id)} 在子进程 {child}（父进程 {proc.pid}）上运行，acknowledged="
                 f"{running[0].get('acknowledged')}",
                 f"inspect active: {short(message_id)} runs in child {child} (parent {proc.pid}), acknowledged="
                 f"{running[0].get('acknowledged')}"))
        target = WORK / held["path"]
        text = target.read_bytes()
        digest = hashlib.sha256(text).hexdigest()
        json.loads(text)
        c.note(t(f"os.replace 已完成：{held['path']} 完整，sha256 {digest[:16]}…；发送 SIGKILL 给子进程 {child}",
                 f"os.replace done: {held['path']} is complete, sha256 {digest[:16]}…; SIGKILL to child {child}"))
        killed.update(pid=child, at=time.time())  # taken before the kill: the redelivery comes after it
        os.kill(child, signal.SIGKILL)

        def second_run_or_end():
            again = [e for e in events("start") if e.get("task_id") == message_id and e["pid"] != child]
            return again or _state(message_id) in ("FAILURE", "REVOKED")
        try:
            wait_until(second_run_or_end, 30, "the message to come back", interval=0.1)
        except WaitTimeout:
            pass
        again = [e for e in events("start") if e.get("task_id") == message_id and e["pid"] != child]
        if not again:
            state = _state(message_id)
            for line in log_lines(proc.log_text(), "WorkerLost", limit=2) + log_lines(proc.log_text(), message_id):
                c.note("  " + line)
        assert again, t(
            f"子进程被杀后任务没有再次执行（状态 {state}）：需要 task_acks_late 加 task_reject_on_worker_lost，"
            "并且任务自己不能关掉它们",
            f"the task never ran again after the child died (state {state}): it needs task_acks_late plus "
            "task_reject_on_worker_lost, and the task must not switch them off")
        c.note(t(f"第二次执行：子进程 {again[0]['pid']}，redelivered={again[0]['redelivered']}",
                 f"second execution: child {again[0]['pid']}, redelivered={again[0]['redelivered']}"))
        assert again[0]["redelivered"], t("第二次执行的消息没有 redelivered 标记",
                                          "the second execution's message is not marked redelivered")
        value = _get(message_id, 30)
        final = target.read_bytes()
        json.loads(final)
        final_digest = hashlib.sha256(final).hexdigest()
        state = _state(message_id)
        c.note(t(f"最终：{state}，文件 sha256 {final_digest[:16]}…，返回 {str(value.get('sha256'))[:16]}…",
                 f"final: {state}, file sha256 {final_digest[:16]}…, returned {str(value.get('sha256'))[:16]}…"))
        assert final_digest == digest and value.get("sha256") == digest, t(
            "重投后文件摘要变了：同一 job 与快照必须写出相同字节",
            "the digest changed after redelivery: one job and snapshot must give the same bytes")
        lost = log_lines(proc.log_text(), "WorkerLostError", limit=1)
        if lost:
            c.note(t("worker 日志：", "worker log: ") + lost[0].split("] ", 1)[-1])
    finally:
        try:
            handshake.stop(drill_dir)  # a held execution (a failed check) lets go before the worker stops
            proc.stop(grace=10)
        finally:  # drawn once the worker has stopped: every execution's end is recorded by then
            attach(c, lambda: drill_timeline(read_events(events_path), message_id, killed, proc.pid))


# ---------------------------------------------------------------- 09.5

def check_versions(c) -> None:
    _import()
    job_id = str(uuid4())
    snapshot_a = [{"id": 1, "name": "old title", "description": "", "is_active": True, "price_cents": 100},
                  {"id": 2, "name": "second", "description": "", "is_active": True, "price_cents": 200}]
    snapshot_b = [{"id": 1, "name": "new title", "description": "", "is_active": True, "price_cents": 100}]
    a = _get(_send(job_id, snapshot_a, str(uuid4())))
    b = _get(_send(job_id, snapshot_b, str(uuid4())))
    target = WORK / str(b.get("path") or a.get("path"))
    data = target.read_bytes()
    try:
        final = json.loads(data)
    except ValueError:
        raise AssertionError(t("最终文件不是完整 JSON", "the final file is not complete JSON")) from None
    digest = hashlib.sha256(data).hexdigest()
    which = [name for name, snap, res in (("A", snapshot_a, a), ("B", snapshot_b, b))
             if final == snap and digest == res.get("sha256")]
    c.note(t(f"同一 job_id {job_id}：先交付快照 A（old title，2 行），再交付快照 B（new title，1 行）",
             f"one job_id {job_id}: snapshot A (old title, 2 rows) delivered, then snapshot B (new title, 1 row)"))
    shown = redact(data[:120].decode(errors="replace"))
    c.note(t(f"最终文件：{shown} → 等于 {which or '都不等于'}", f"final file: {shown} → equals {which or 'neither'}"))
    assert len(which) == 1, t(
        "最终文件应完整地等于其中一份快照（各自的 sha256 也对得上），而不是两者的混合",
        "the final file should equal exactly one snapshot (with that delivery's sha256), not a blend of both")
    c.note(t(f"最后完成的 {which[0]} 获胜：os.replace 只保证文件不被读到一半，不决定哪个业务版本正确——"
             "第 11 课用状态表固定快照、消息只带 job_id、租约 token 决定谁能发布",
             f"the last finisher ({which[0]}) won: os.replace only keeps readers from half files; it does not pick the "
             "right business version — lesson 11 fixes the snapshot in a table, sends only job_id and lets a lease "
             "token decide who may publish"))


if __name__ == "__main__":
    try:
        WORKER = DeclaredWorker()
    except AssertionError as exc:
        NO_WORKER = str(exc)
    run(checks())
