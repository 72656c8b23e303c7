"""Verifier for lesson 09: late acks, redelivery, and output that is safe to produce twice.

09.1  python duplicate_export.py passes; two more messages with different ids and one job_id
      return the same path and sha256, and that digest is the file's
09.2  while eight deliveries of one large snapshot rewrite artifacts/<job>.json, inotify shows the name
      only ever replaced (no in-place write), each delivery from a temp file of its own name, and a reader
      thread never gets a partial file; a delivery whose os.replace fails leaves no temp file behind
09.3  the running worker answers `inspect conf` with task_acks_late, task_reject_on_worker_lost,
      worker_prefetch_multiplier 1 and visibility_timeout 60 in all three places
09.4  redelivery drill: a worker of ours (the learner's app through lab09_drill.py) pauses the first
      execution right after os.replace; its pool child — found from the worker's PID and
      `inspect active` — gets SIGKILL; the message comes back (redelivered), runs again, and the final
      file is complete with the digest it had when the child died
09.5  exercise: one job_id delivered with snapshot A, then with snapshot B: the file is complete and
      equals exactly one of them (the last finisher's) — os.replace does not choose business versions

The declared worker (tasks.json) serves 09.1–09.3 and 09.5; 09.4 uses its own worker on a private
queue and stops it by its PID.  The learner's modules never load here (the judge): sending and waiting
happen in a probe (shared.lesson_celery.LearnerTask), which reports what happened; the workers are asked
(inspect conf, active) through the checker's own Celery client; the checks decide.
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
import threading
import time
from pathlib import Path
from uuid import uuid4

from shared import handshake
from shared.lesson_celery import (ENDED_STATES, LearnerTask, declared_worker, kit_inspect, private_worker_argv,
                                  start_worker)
from shared.logs import LOG_DIR
from shared.events import read_events, short
from shared.proc import children_of
from shared.scripts import log_lines, run_script
from shared.settings import WORK, redact
from shared.figures import attach, bar, lane, lanes, mark
from shared.i18n import t
from shared.probe import Probe
from shared.proc import WaitTimeout, wait_until
from shared.tap import Check, run

ARTIFACTS = WORK / "artifacts"
VISIBILITY = 60
REPLY_SECONDS = 45  # bound on getting one worker's control reply; a pass takes milliseconds
learner = Probe(verifiers=Path(__file__).resolve().parent)  # the learner's modules load there, never here
EXPORT = LearnerTask(learner, "export_tasks:export_products")


def checks() -> list[Check]:
    return [
        Check("09.1", check_duplicate, "worker; python duplicate_export.py"),
        Check("09.2", check_atomic, "worker; a reader thread; inotify"),
        Check("09.3", check_config, "worker; celery inspect conf"),
        Check("09.4", check_redelivery, "our lab09_drill.py worker, child killed"),
        Check("09.5", check_versions, "worker"),
    ]


def _import() -> None:
    """celery_app (with its app) and export_tasks (with export_products) load in the probe."""
    learner.module("celery_app", values=("app",))
    EXPORT.load()


def _ask(node: str, method: str, **arguments):
    """One worker's reply to a control command (inspect conf, active …), through the checker's own client
    (shared.lesson_celery.kit_inspect); no reply within REPLY_SECONDS fails the check."""
    answer = kit_inspect(node, method, REPLY_SECONDS, **arguments)
    if answer is None:
        raise AssertionError(t("worker {node} did not answer inspect {method} within {reply_seconds} s", node=node,
                               method=method, reply_seconds=REPLY_SECONDS))
    return answer


def _rows(count: int, tag: str) -> list[dict]:
    return [{"id": n, "name": f"{tag} 商品 {n:04d}", "description": "重复交付实验 / duplicate delivery drill " * 2,
             "is_active": n % 3 != 0, "price_cents": n * 125} for n in range(1, count + 1)]


def _get(task_id: str, seconds: float = 20):
    """AsyncResult(task_id).get(timeout=seconds) in the probe: the value; what it raised fails the check."""
    return EXPORT.value(task_id, seconds, lambda why: t("task {task_id} did not succeed: {why}", task_id=task_id,
                                                         why=why))


def _artifact(job_id: str) -> bytes:
    """artifacts/<job_id>.json as the checker reads it (the name lesson 08 set), whatever a result says."""
    target = ARTIFACTS / f"{job_id}.json"
    assert target.is_file(), t("artifacts/{job_id}.json is missing: name the output by job_id only", job_id=job_id)
    return target.read_bytes()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- inotify (Linux; WSL2 included)

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x8, 0x40, 0x80, 0x100, 0x200
WRITE_IN_PLACE = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE


class DirWatch:
    """The create/write/rename events on one file name in a folder, or'ed into `mask` by a thread; and the
    names renamed away from in that folder (`moved_from`, in order: the temp files replaced onto a target)."""

    def __init__(self, folder: Path, name: str):
        self.name, self.mask, self.moved_from = name, 0, []
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
            if name == self.name:
                self.mask |= mask
            elif mask & IN_MOVED_FROM:
                self.moved_from.append(name)
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
    done = run_script(["duplicate_export.py"], 40, late=t("duplicate_export.py did not finish within 40 s"))
    c.note(t("python duplicate_export.py → exit code {returncode}", returncode=done.code))
    done.tail(c, 4, width=240)
    assert done.code == 0 and "same logical output" in done.output, t(
        "duplicate_export.py did not print same logical output (see the output above)")

    _import()
    job_id = str(uuid4())
    rows = _rows(3, "dup")
    # The same snapshot as another producer may build it: equal rows, keys in another order.
    reordered = [dict(reversed(list(row.items()))) for row in rows]
    first = EXPORT.send([job_id, rows], str(uuid4()))
    second = EXPORT.send([job_id, reordered], str(uuid4()))
    a, b = _get(first), _get(second)
    c.note(t("one job_id {job_id}, two messages {first} and {second} (one snapshot; the second lists each row's "
             "fields in reverse order)", job_id=job_id, first=short(first), second=short(second)))
    c.note(f"  1: path={a.get('path')} sha256={str(a.get('sha256'))[:16]}…")
    c.note(f"  2: path={b.get('path')} sha256={str(b.get('sha256'))[:16]}…")
    assert first != second
    assert a.get("path") == b.get("path"), t("the two executions returned different paths ({path} / {path2}): name "
                                             "the output by job_id only", path=a.get('path'), path2=b.get('path'))
    assert a.get("sha256") and a.get("sha256") == b.get("sha256"), t(
        "the two executions returned different sha256: one snapshot must give the same bytes (json.dumps with "
        "sort_keys=True, no timestamp or message id inside)")
    # The job's own file, where the course names it, read by the checker: the results' word is matched
    # against it, never taken for it.
    data = _artifact(job_id)
    on_disk = _sha(data)
    assert on_disk == a["sha256"], t("the file's sha256 {on_disk}… differs from the result", on_disk=on_disk[:16])
    try:
        written = json.loads(data)
    except ValueError:
        written = None
    assert written == rows, t("artifacts/{job_id}.json does not hold the snapshot that was sent", job_id=job_id)
    c.note(t("both results agree and match the file's own sha256"))


# ---------------------------------------------------------------- 09.2

def check_atomic(c) -> None:
    _import()
    ARTIFACTS.mkdir(exist_ok=True)
    job_id = str(uuid4())
    target = ARTIFACTS / f"{job_id}.json"
    rows = _rows(1500, "big")
    before = {p.name for p in ARTIFACTS.iterdir()}
    try:
        watch = DirWatch(ARTIFACTS, target.name)
    except OSError as exc:
        watch = None
        c.note(t("inotify unavailable ({exc}): the reader thread alone decides", exc=exc))
    reader = Reader(target)
    reader.start()
    deliveries = [EXPORT.send([job_id, rows], str(uuid4())) for _ in range(8)]
    try:
        for delivery in deliveries:
            _get(delivery, 30)
    finally:
        reader.stop()
        if watch:
            watch.close()
    size = target.stat().st_size if target.exists() else 0
    c.note(t("{n_deliveries} deliveries of one job ({n_rows} rows, {size} KiB); the reader got complete JSON "
             "{complete} times and a partial file {n_partial} times", n_deliveries=len(deliveries), n_rows=len(rows),
             size=size // 1024, complete=reader.complete, n_partial=len(reader.partial)))
    # inotify decides first: whether the reader thread happened to read mid-write depends on timing, what
    # the kernel saw happen to the name does not.
    if watch:
        mask = watch.mask
        in_place = [name for bit, name in ((IN_CREATE, "create"), (IN_MODIFY, "write"), (IN_CLOSE_WRITE, "close-write"))
                    if mask & bit]
        c.note(t("inotify: events on {name} = {in_place}", name=target.name,
                 in_place=t(', ').join(in_place) or t('moved-to only (replaced whole)')))
        assert not (mask & WRITE_IN_PLACE), t("the target was written in place (create/write): a reader can see half "
                                              "of it even if this run did not catch it. Write a temp file and "
                                              "os.replace it")
        # Each delivery's own temp file: a redelivery that overlaps the first execution of the job (late ack)
        # must not write into the file the first one is about to os.replace.
        moved = watch.moved_from
        shared = sorted({name for name in moved if moved.count(name) > 1})
        c.note(t("temp files replaced onto it: {n_moved}, under {n_names} different names", n_moved=len(moved),
                 n_names=len(set(moved))))
        assert not shared, t("several deliveries of one job wrote a temp file of the same name ({name}): two "
                             "executions that overlap (a redelivery while the first still runs, or two threads of "
                             "one worker) then write into each other's file, and one os.replace finds it gone. Give "
                             "each execution its own temp name, e.g. f\"{{safe_id}}.{{uuid4()}}.tmp\"",
                             name=shared[0])
    assert not reader.partial, t("the reader saw an incomplete file ({partial} bytes): write a temp file of this "
                                 "run, then os.replace it onto the target", partial=reader.partial[:3])
    try:
        json.loads(target.read_bytes())
    except (OSError, ValueError):
        raise AssertionError(t("the final file is not complete JSON")) from None
    left = sorted({p.name for p in ARTIFACTS.iterdir()} - before - {target.name})
    assert not left, t("files left behind after success: {left}", left=left)

    # A failing delivery: the target name is taken by a directory, so os.replace raises.
    broken_id = str(uuid4())
    blocker = ARTIFACTS / f"{broken_id}.json"
    blocker.mkdir()
    (blocker / "keep").write_text("a directory in the way\n")
    before = {p.name for p in ARTIFACTS.iterdir()}
    try:
        failing = EXPORT.send([broken_id, rows[:2]], str(uuid4()))
        state = EXPORT.settled(failing, 20)
        left = sorted({p.name for p in ARTIFACTS.iterdir()} - before)
        c.note(t("a delivery whose os.replace fails → {state}; files left behind: {left}", state=state,
                 left=left or t('none')))
        assert state == "FAILURE", t("with a directory on the target name the task should fail, got {state}",
                                     state=state)
        assert not left, t("the failure left {left} behind: unlink this run's temp file in finally", left=left)
    finally:
        for path in sorted(blocker.rglob("*"), reverse=True):
            path.unlink()
        blocker.rmdir()


# ---------------------------------------------------------------- 09.3

def check_config(c) -> None:
    worker = declared_worker()
    _import()
    assert worker.alive(), t("the worker (pid {pid}) has exited", pid=worker.pid)
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
    c.note(t("celery inspect conf -d {nodename} (what the running worker actually uses):", nodename=worker.nodename))
    keys = list(seen)
    c.note("  " + ", ".join(f"{key}={seen[key]!r}" for key in keys[:3]))
    c.note("  visibility_timeout: " + ", ".join(f"{key.split('.')[0]}={seen[key]!r}" for key in keys[3:]))
    interval = broker_opts.get("unacked_restore_interval")
    throttle = broker_opts.get("unacked_restore_throttle")
    if interval is not None or throttle is not None:
        c.note(t("  unacked restore sweep: every {interval} s, scanning every {throttle} call(s)",
                 interval=interval or 10, throttle=throttle or 10))
    else:
        c.note(t("  unacked restore sweep: default, about every 100 s (see the guide)"))
    assert seen["task_acks_late"] is True, t("task_acks_late is not True: messages are acked before the work runs")
    assert seen["task_reject_on_worker_lost"] is True, t("task_reject_on_worker_lost is not True: a lost child acks "
                                                         "the message as failed instead of requeueing it")
    assert seen["worker_prefetch_multiplier"] == 1, t("worker_prefetch_multiplier is {worker_prefetch_multiplier}, "
                                                      "it should be 1",
                                                      worker_prefetch_multiplier=seen['worker_prefetch_multiplier'])
    wrong = [key for key in list(seen)[3:] if seen[key] != VISIBILITY]
    assert not wrong, t("visibility_timeout is not {visibility} in: {wrong} (all three must agree; restart the "
                        "worker)", visibility=VISIBILITY, wrong=wrong)


# ---------------------------------------------------------------- 09.4

def drill_timeline(events: list[dict], message_id: str, killed: dict, worker_pid: int) -> dict:
    """A picture of the drill (never a verdict): a lane per pool child that ran our message, a bar per
    execution (the killed one ends at the SIGKILL), the pause after os.replace, the SIGKILL we sent."""
    job, victim = message_id[:8], killed.get("pid")
    ours = [e for e in events if isinstance(e.get("at"), (int, float)) and isinstance(e.get("pid"), int)]
    starts = [e for e in ours if e.get("kind") == "start" and e.get("task_id") == message_id]
    pids = list(dict.fromkeys(e["pid"] for e in starts))
    if victim is not None and victim not in pids:
        pids.insert(0, victim)
    rows = []
    for pid in pids:
        mine = [e for e in ours if e["pid"] == pid]
        bars = []
        for start in (e for e in starts if e["pid"] == pid):
            end = next((e for e in mine if e.get("kind") == "end" and e.get("task_id") == message_id
                        and e["at"] >= start["at"]), None)
            if end is not None:
                stop, state = end["at"], str(end.get("state"))
            elif pid == victim and "at" in killed:
                stop, state = killed["at"], "SIGKILL"
            else:
                stop, state = start["at"], "no end recorded"
            again = bool(start.get("redelivered"))
            bars.append(bar(start["at"], stop, f"{job} {'redelivered' if again else 'first'} run: {state}",
                            "retry" if again else "run"))
        marks = [mark(e["at"], "os.replace, held", "hold") for e in mine if e.get("kind") == "held"]
        marks += [mark(e["at"], "os.replace", "event") for e in mine if e.get("kind") == "replaced"]
        if pid == victim and "at" in killed:
            marks.append(mark(killed["at"], "SIGKILL", "killed"))
        rows.append(lane(f"child {pid}" + (" (killed)" if pid == victim else ""), bars=bars, marks=marks))
    return lanes(t("a pool child SIGKILLed; message {job}… redelivered to another child", job=job), rows,
                 caption=t("drill worker pid {worker_pid}, concurrency 1: the pool replaces the killed child",
                           worker_pid=worker_pid))


def check_redelivery(c) -> None:
    worker = declared_worker()
    _import()
    job_id = str(uuid4())
    drill_dir = LOG_DIR / f"drill-{job_id[:8]}"  # this drill's events and handshake files, nobody else's
    drill_dir.mkdir(parents=True)
    events_path = drill_dir / "events.jsonl"
    # A queue of our own: the declared worker never sees this message.  One fixed name, so repeated
    # runs leave no trail of queue bindings in Redis.
    queue = "lab09-drill"
    node = f"lab09drill{os.getpid()}@{worker.nodename.split('@', 1)[-1]}"
    argv = private_worker_argv(worker.argv, queue, node, app="lab09_drill:app")
    env = dict(os.environ, TASKLAB_DRILL_DIR=str(drill_dir), TASKLAB_DRILL_JOB=job_id)

    def events(kind: str) -> list[dict]:
        return read_events(events_path, kind=kind)

    proc = start_worker(argv, "worker-drill.log", env=env)
    message_id = str(uuid4())
    killed: dict = {}  # the SIGKILL, for the figure: which child, when (this process's clock)
    try:
        c.note(t("drill worker: pid {pid}, node {node}, private queue {queue}, concurrency 1", pid=proc.pid, node=node,
                 queue=queue))
        EXPORT.send([job_id, _rows(40, "drill")], message_id, queue)
        # Either it reaches os.replace (and is held there), or it ends without ever calling it: a fact
        # as soon as the result is in, so a write-in-place never costs this check its whole bound.
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: events("held") or EXPORT.state(message_id) in ENDED_STATES, 30,
                       "the first execution to reach os.replace", interval=0.1)
        if not events("held"):
            state = EXPORT.state(message_id)
            raise AssertionError(t("the first execution never reached os.replace (state {state}): export_products "
                                   "must write a temp file and os.replace it onto the target", state=state))
        held = events("held")[0]
        child = held["pid"]
        assert child in children_of(proc.pid), t("pid {child} is not a child of drill worker {pid}; not killing it",
                                                 child=child, pid=proc.pid)
        # The held execution waits for our word (it never comes: the child is killed), so this is no race.
        active = _ask(node, "active") or []
        running = [task for task in active if task.get("id") == message_id]
        assert running and running[0].get("worker_pid") == child, t(
            "inspect active does not show {message_id} running in child {child}: {active}", message_id=message_id,
            child=child, active=active)
        c.note(t("inspect active: {message_id} runs in child {child} (parent {pid}), acknowledged={acknowledged}",
                 message_id=short(message_id), child=child, pid=proc.pid, acknowledged=running[0].get('acknowledged')))
        target = WORK / held["path"]
        text = target.read_bytes()
        digest = _sha(text)
        json.loads(text)
        c.note(t("os.replace done: {path} is complete, sha256 {digest}…; SIGKILL to child {child}", path=held['path'],
                 digest=digest[:16], child=child))
        killed.update(pid=child, at=time.time())  # taken before the kill: the redelivery comes after it
        os.kill(child, signal.SIGKILL)

        def second_run() -> list[dict]:
            return [e for e in events("start") if e.get("task_id") == message_id and e["pid"] != child]
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: second_run() or EXPORT.state(message_id) in ("FAILURE", "REVOKED"), 30,
                       "the message to come back", interval=0.1)
        again = second_run()
        if not again:
            state = EXPORT.state(message_id)
            for line in log_lines(proc.log_text(), "WorkerLost", limit=2) + log_lines(proc.log_text(), message_id):
                c.note("  " + line)
        assert again, t("the task never ran again after the child died (state {state}): it needs task_acks_late plus "
                        "task_reject_on_worker_lost, and the task must not switch them off", state=state)
        c.note(t("second execution: child {pid}, redelivered={redelivered}", pid=again[0]['pid'],
                 redelivered=again[0]['redelivered']))
        assert again[0]["redelivered"], t("the second execution's message is not marked redelivered")
        value = _get(message_id, 30)
        final = target.read_bytes()
        json.loads(final)
        final_digest = _sha(final)
        state = EXPORT.state(message_id)
        c.note(t("final: {state}, file sha256 {final_digest}…, returned {sha256}…", state=state,
                 final_digest=final_digest[:16], sha256=str(value.get('sha256'))[:16]))
        assert final_digest == digest and value.get("sha256") == digest, t(
            "the digest changed after redelivery: one job and snapshot must give the same bytes")
        lost = log_lines(proc.log_text(), "WorkerLostError", limit=1)
        if lost:
            c.note(t("worker log: ") + lost[0].split("] ", 1)[-1])
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
    a = _get(EXPORT.send([job_id, snapshot_a], str(uuid4())))
    b = _get(EXPORT.send([job_id, snapshot_b], str(uuid4())))
    data = _artifact(job_id)
    try:
        final = json.loads(data)
    except ValueError:
        raise AssertionError(t("the final file is not complete JSON")) from None
    digest = _sha(data)
    which = [name for name, snap, res in (("A", snapshot_a, a), ("B", snapshot_b, b))
             if final == snap and digest == res.get("sha256")]
    c.note(t("one job_id {job_id}: snapshot A (old title, 2 rows) delivered, then snapshot B (new title, 1 row)",
             job_id=job_id))
    shown = redact(data[:120].decode(errors="replace"))
    c.note(t("final file: {shown} → equals {which}", shown=shown, which=which or t('neither')))
    assert len(which) == 1, t("the final file should equal exactly one snapshot (with that delivery's sha256), not a "
                              "blend of both")
    c.note(t("the last finisher ({which}) won: os.replace only keeps readers from half files; it does not pick the "
             "right business version — lesson 11 fixes the snapshot in a table, sends only job_id and lets a lease "
             "token decide who may publish", which=which[0]))


if __name__ == "__main__":
    run(checks())
