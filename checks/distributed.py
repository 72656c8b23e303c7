"""Grading a class on several machines: one Celery task per learner folder, results kept by content.

    python -m checks.distributed worker --broker URL [-c N] [-n NAME]          # on each grading machine
    python -m checks.distributed grade --broker URL --lab DIR... [--lessons NN...] [--out DIR]

The broker URL may also come from LAB_GRADE_BROKER (better: a password in argv is visible to `ps`).

The instructor's machine packs each folder (tar.gz in memory, without .venv, .git and the like), names
the grading by its content — key = sha256(packed bytes) : lessons : kit version — and sends one task per
folder.  A worker unpacks it into a fresh temporary folder and grades it exactly as `python -m checks
grade` does locally (checks.grade.grade_one -> checks.cli.run_many: every lesson in a box with its own
servers).  The result goes into Redis under the key with SET NX, and the instructor reads it from there.

Delivery follows the kit's own lesson 09: late ack, requeue when a pool child is lost, one message
reserved per process, a visibility timeout longer than the slowest grading.  So a machine that dies
mid-grade costs a redelivery, never a lost folder, and a redelivery writes nothing new: the first
stored result stands (SET NX), and each execution is recorded (`deliveries`) so duplicates are counted.
checks/distributed-grading.md says how to run it for a class.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import functools
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery

from checks import grade, intake
from checks.workdir import LAB_DIR, UsageError
from shared.i18n import t
from shared.manifest import KIT_ROOT, MANIFEST

if __name__ == "__main__":  # through the imported module: one app and one task, checks.distributed's
    from checks.distributed import main as _main
    sys.exit(_main())

QUEUE = "tasklab-grade"
RESULTS = "tasklab:grade:result:"         # + key -> the stored grading (JSON), written once (SET NX)
DELIVERIES = "tasklab:grade:deliveries:"  # + key -> one JSON line per execution that started
KEEP_SECONDS = 30 * 24 * 3600             # results and delivery lists expire after a month
SIZE_LIMIT = 5 * 1024 * 1024              # packed bytes per folder; a course folder is a few hundred KB
RAW_FACTOR = 20                           # unpacked bytes per packed limit: zeros pack small but fill disks
# Longer than the slowest grading (all 16 lessons of one folder on a loaded machine: ~10 min): an
# unacked message is handed out again once it is this old, running or not (lesson 09).
VISIBILITY_SECONDS = int(os.environ.get("LAB_GRADE_VISIBILITY", "3600"))
# Lesson 09: the sweep that returns the messages of a worker that died as a whole runs every
# interval x throttle seconds (100 s by default); every 5 s instead.
RESTORE_INTERVAL = 5
STORE_PATIENCE = 180.0                    # seconds a worker keeps retrying Redis (a broker restart)
# A folder whose grading was started this many times without a result (each time its process died) is
# not handed out again: the next start stores an error for it.  Deaths of machines, a killed pool child and
# a broker restart each cost a folder one start, so a healthy class never comes near it.
MAX_EXECUTIONS = 4

app = Celery("tasklab_grade")


def configure(broker_url: str, result_url: str | None = None, visibility: int = VISIBILITY_SECONDS) -> Celery:
    """The same settings on both sides; a worker must be started after this (its pool forks from it)."""
    app.conf.update(
        broker_url=broker_url,
        # The results that matter live in the store below; Celery's own backend is optional (task states).
        result_backend=result_url,
        task_ignore_result=result_url is None,
        task_serializer="json", result_serializer="json", accept_content=["json"],
        task_default_queue=QUEUE,
        task_acks_late=True,                 # ack after grading: a crash mid-grade leaves the message
        task_reject_on_worker_lost=True,     # a killed pool child requeues its folder instead of acking it
        worker_prefetch_multiplier=1,        # one folder reserved per process: none waits behind a slow one
        # A running grading goes on when the broker connection drops; its result reaches the store anyway.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a broker restart is waited out, not fatal
        broker_transport_options={
            "visibility_timeout": visibility,
            "unacked_restore_interval": RESTORE_INTERVAL,
            "unacked_restore_throttle": 1,
            "socket_timeout": 30,            # a 5 MB message over a slow link
            "socket_connect_timeout": 5,
        },
        result_backend_transport_options={"visibility_timeout": visibility},
        visibility_timeout=visibility,       # Celery's Redis notes want all three (lesson 09)
    )
    _store.cache_clear()
    return app



@functools.lru_cache(maxsize=1)
def _store():
    """Redis on the broker's server: the results store and the delivery lists (one server to secure)."""
    import redis
    url = app.conf.broker_url
    if not url or not url.startswith(("redis://", "rediss://")):
        raise UsageError(t("分布式批改需要 Redis broker（redis:// 或 rediss://）",
                           "distributed grading needs a Redis broker (redis:// or rediss://)"))
    return redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5, health_check_interval=15)


if os.environ.get("LAB_GRADE_BROKER"):  # `celery -A checks.distributed worker` finds its broker here
    configure(os.environ["LAB_GRADE_BROKER"])


def _patient(op, limit: float = STORE_PATIENCE):
    """Run a Redis operation, waiting out a broker restart (bounded)."""
    import redis
    deadline, delay = time.monotonic() + limit, 0.2
    while True:
        try:
            return op()
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


@functools.lru_cache(maxsize=1)
def kit_version() -> str:
    """The kit's commit; without git, a hash of tasks.json.  Part of the key: other rules, other results.
    Computed once per process, so a worker reports the code it started with."""
    found = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(KIT_ROOT), "rev-parse", "HEAD"],
                           capture_output=True, text=True)
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip()
    return "tasks-" + hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:28]


def grading_key(packed: bytes, lesson_ids: list[str], kit: str) -> str:
    """What the result depends on: the folder's bytes, the lessons asked for, the kit's rules."""
    return f"{hashlib.sha256(packed).hexdigest()}:{'-'.join(lesson_ids)}:{kit[:12]}"


# --- packing ---------------------------------------------------------------------------------------

class PackRefused(Exception):
    """This folder cannot be sent; the message says why (it becomes that student's error)."""


def _too_big(limit: int) -> PackRefused:
    mb = limit / 1024 / 1024
    return PackRefused(t(f"文件夹打包后超过 {mb:g} MB 的上限，没有发送去批改：删掉大文件（数据、下载、构建产物）后再交",
                         f"the folder packs to more than the {mb:g} MB limit and was not sent for grading: "
                         "remove large files (data, downloads, build output) and hand it in again"))


def _caps(limit: int) -> intake.Caps:
    return dataclasses.replace(intake.CAPS, total_bytes=min(intake.CAPS.total_bytes, RAW_FACTOR * limit))


def pack_folder(folder: Path, limit: int = SIZE_LIMIT) -> bytes:
    """The folder as tar.gz bytes, the same for the same content (sorted, no owners or times): taken in as
    data first (checks/intake.py: no link followed, no special file read, what a local grade skips left
    out), so only plain files travel.  Refused past `limit` packed bytes or 20x that unpacked."""
    with tempfile.TemporaryDirectory(prefix="tasklab-pack-") as tmp:
        try:
            copy = intake.take_in(folder, Path(tmp) / "copy", _caps(limit))
        except intake.IntakeRefused as exc:
            raise PackRefused(str(exc)) from None
        try:
            return intake.pack(copy.path, limit)
        except intake.IntakeRefused:
            raise _too_big(limit) from None


def unpack(packed: bytes, dest: Path, limit: int = SIZE_LIMIT) -> None:
    """Into `dest` (made here), every member checked by the kit itself (checks/intake.py unpack: plain
    files and folders only, relative names, sizes counted as they are read) — never tarfile's extract."""
    try:
        intake.unpack(packed, dest, limit, _caps(limit))
    except intake.IntakeRefused as exc:
        raise PackRefused(str(exc)) from None


# --- the wire: LessonResults as JSON and back ---------------------------------------------------------

def results_to_wire(results: list, error: str | None, lab: str) -> dict:
    return {"lab": lab, "error": error, "lessons": [
        {"id": r.lesson["id"], "source": r.source, "seconds": r.seconds, "notices": r.notices,
         "problems": r.problems, "checks": [dataclasses.asdict(c) for c in r.checks]} for r in results]}


def _replace_path(value, old: str, new: str):
    """Paths of the worker's temporary copy become the learner's folder, as in a local grade."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_path(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_path(v, old, new) for k, v in value.items()}
    return value


def wire_to_results(wire: dict, data: dict, folder: str) -> tuple[list, str | None]:
    """Rebuild the LessonResults the worker had, so the report files come from the local code path."""
    from checks.runner import CheckResult, LessonResult
    if wire["lab"]:
        wire = _replace_path(wire, wire["lab"], folder)
    by_id = {l["id"]: l for l in data["lessons"]}
    results = [LessonResult(by_id[l["id"]], l["source"], [CheckResult(**c) for c in l["checks"]], l["seconds"],
                            notices=l["notices"], problems=l["problems"]) for l in wire["lessons"]]
    return results, wire["error"]


# --- the worker side -----------------------------------------------------------------------------------

def store_result(key: str, entry: dict) -> bool:
    """Write once: True for the first writer; a later one (a redelivery) leaves the first result alone."""
    return bool(_patient(lambda: _store().set(RESULTS + key, json.dumps(entry, ensure_ascii=False),
                                              nx=True, ex=KEEP_SECONDS)))


def record_delivery(key: str, delivery: dict) -> None:
    def push():
        with _store().pipeline() as pipe:
            pipe.rpush(DELIVERIES + key, json.dumps(delivery)).expire(DELIVERIES + key, KEEP_SECONDS).execute()
    _patient(push)


def grade_packed(name: str, packed: bytes, lesson_ids: list[str], key: str) -> dict:
    """Unpack into a fresh folder and grade it the local way; return the results on the wire."""
    from checks.cli import _load, _select, run_many
    data = _load()
    lessons = _select(data, lesson_ids, allow_planned=True)  # the instructor's side chose and checked them
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        lab = Path(tmp).resolve() / "tasks_lab"
        # Its own work/log folders: two deliveries of one folder on one machine never share a scratch copy.
        safe = re.sub(r"[^\w.-]", "_", name)[:80]
        student = grade.Student(raw=str(lab), name=f"{safe}-{secrets.token_hex(4)}")  # its folders: grade.scope_of
        wanted, mine = key.rsplit(":", 1)[-1], kit_version()
        try:
            if not mine.startswith(wanted):
                raise PackRefused(t(f"这台批改机的工具包版本是 {mine[:12]}，教师端是 {wanted}：更新它（git pull）并重启 worker",
                                    f"this grading machine runs kit {mine[:12]}, the instructor's is {wanted}: "
                                    "update it (git pull) and restart the worker"))
            unpack(packed, lab)
        except (PackRefused, OSError) as exc:
            student.error = str(exc) if isinstance(exc, PackRefused) else t(
                f"打包的文件夹无法解开：{exc}", f"the packed folder could not be unpacked: {exc}")
            student.results = grade.errored(lessons, student.error)
        else:  # every lesson boxed, as `checks grade`; a grading machine keeps no learner files after it
            grade.grade_one(student, lessons, data, run_many)
        wire = results_to_wire(student.results, student.error, str(lab))
        wire["retry"] = not mine.startswith(wanted)  # not the folder's fault: grade it again next time
        return wire


TEMP_PREFIX = grade.TEMP_PREFIX  # + pid: a grading's temporary copy, work and log folders


def sweep_leftovers() -> list[Path]:
    """A SIGKILLed pool child never ran its cleanup: remove the folders named after processes that are
    gone (this machine's only; the pid in the name says whose)."""
    return grade.sweep_leftovers([Path(tempfile.gettempdir()), *(LAB_DIR / kind / "grade" for kind in grade.SCRATCH)])


@app.task(name="tasklab.grade_folder", bind=True, acks_late=True, reject_on_worker_lost=True)
def grade_folder(self, key: str, name: str, packed_b64: str, lessons: list[str]) -> dict:
    """Grade one packed folder; safe to run twice for one key (the first stored result stands)."""
    host = self.request.hostname or "local"
    record_delivery(key, {"host": host, "pid": os.getpid(), "task": self.request.id, "at": time.time(),
                          "redelivered": bool((self.request.delivery_info or {}).get("redelivered"))})
    if _patient(lambda: _store().exists(RESULTS + key)):
        return {"key": key, "graded": False}  # graded already; the ack was lost (a crash or a restart)
    sweep_leftovers()
    started_before = _patient(lambda: _store().llen(DELIVERIES + key)) - 1
    if started_before >= MAX_EXECUTIONS:  # a folder whose grading kills its worker every time: stop here
        message = t(f"这个文件夹的批改已开始 {started_before} 次，每次批改进程都在出结果前死掉（被杀？内存耗尽？）："
                    f"不再重试。单独批改它看原因：python -m checks grade --lab 文件夹",
                    f"grading this folder started {started_before} times and each time the grading process died "
                    "before a result (killed? out of memory?): not retried again. Grade it alone to see why: "
                    "python -m checks grade --lab DIR")
        entry = {"key": key, "name": name, "worker": host, "pid": os.getpid(), "kit": kit_version(), "seconds": 0.0,
                 "result": {"lab": "", "error": message, "lessons": [], "retry": False}}
        return {"key": key, "graded": True, "stored": store_result(key, entry)}
    started = time.monotonic()
    try:
        wire = grade_packed(name, base64.b64decode(packed_b64), lessons, key)
    except Exception as exc:  # noqa: BLE001 - this machine's fault, not the folder's: said now, graded next run
        message = t(f"批改机 {host} 出错：{type(exc).__name__}: {exc}", f"grading machine {host} failed: "
                    f"{type(exc).__name__}: {exc}")
        wire = {"lab": "", "error": message, "lessons": [], "retry": True}
    entry = {"key": key, "name": name, "worker": host, "pid": os.getpid(), "kit": kit_version(),
             "seconds": round(time.monotonic() - started, 3), "result": wire}
    return {"key": key, "graded": True, "stored": store_result(key, entry)}


def run_worker(broker_url: str, concurrency: int = 1, name: str | None = None, result_url: str | None = None,
               visibility: int = VISIBILITY_SECONDS, loglevel: str = "INFO") -> None:
    """A Celery worker for the grading queue (prefork, -O fair, prefetch 1); returns when it stops."""
    from checks.runner import boxing
    if boxing() != "on":
        from checks.box import availability
        raise UsageError(t(f"这台机器无法为学生代码创建沙箱（{availability()[1]}），不能作为批改机",
                           f"no box can be made for learner code here ({availability()[1]}): this machine "
                           "cannot grade"))
    kit_version()  # fixed now, before the pool forks: the version of the code this worker runs
    configure(broker_url, result_url, visibility)
    argv = ["worker", "-Q", QUEUE, "-P", "prefork", "-c", str(concurrency), "-O", "fair",
            "--prefetch-multiplier", "1", "-l", loglevel, "--without-gossip", "--without-mingle"]
    if name:
        argv += ["-n", name]
    app.worker_main(argv)


# --- the instructor side -------------------------------------------------------------------------------

@dataclasses.dataclass
class Part:
    """One grading task's share of a student: all the lessons of their folder, or (--at REF with {NN})
    one lesson from the commit they made for it."""
    student: object
    lessons: list[str]
    results: list | None = None  # filled when its result is back (or at once, for an error of its own)


def _sources(student, lessons: list[dict], at: str | None, tmp: Path) -> list[tuple[list[dict], Path | str]]:
    """(lessons, folder to pack) per part; a lesson whose commit cannot be exported gets its error text
    instead of a folder.  Without --at: the folder itself, all lessons in one part."""
    from checks.gitread import export_commit
    if at is None:
        return [(lessons, student.folder)]
    if "{NN}" not in at:
        return [(lessons, export_commit(student.folder, at, tmp / student.name / "all"))]
    parts = []
    for lesson in lessons:
        try:
            parts.append(([lesson], export_commit(student.folder, at.replace("{NN}", lesson["id"]),
                                                  tmp / student.name / lesson["id"])))
        except UsageError as exc:
            parts.append(([lesson], str(exc)))
    return parts


def pack_class(students: list, lessons: list[dict], size_limit: int, kit: str,
               at: str | None = None) -> tuple[dict, dict]:
    """key -> parts, key -> packed bytes.  A folder (or a commit) that cannot be packed gets its error
    here and is left out; the rest of the class goes on."""
    jobs: dict[str, list[Part]] = {}
    packed: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="tasklab-pack-") as tmp:
        for s in students:
            s.parts = []
            try:
                s.folder = grade.folder_as_given(s.raw)
                sources = _sources(s, lessons, at, Path(tmp))
            except (UsageError, OSError) as exc:
                s.error = str(exc) if isinstance(exc, UsageError) else t(f"无法读取文件夹：{exc}",
                                                                         f"cannot read the folder: {exc}")
                s.results = grade.errored(lessons, s.error)
                continue
            for part_lessons, source in sources:
                part = Part(s, [l["id"] for l in part_lessons])
                s.parts.append(part)
                if isinstance(source, str):  # this lesson's commit could not be exported
                    part.results = grade.errored(part_lessons, source)
                    continue
                try:
                    data = pack_folder(source, size_limit)
                except (PackRefused, OSError) as exc:
                    message = str(exc) if isinstance(exc, PackRefused) else t(f"无法读取文件夹：{exc}",
                                                                              f"cannot read the folder: {exc}")
                    part.results = grade.errored(part_lessons, message)
                    if len(sources) == 1:
                        s.error = message
                    continue
                key = grading_key(data, part.lessons, kit)
                jobs.setdefault(key, []).append(part)  # identical folders: graded once, reported for each
                packed.setdefault(key, data)
            if all(p.results is not None for p in s.parts):  # nothing of theirs to send
                s.results = [r for p in s.parts for r in p.results]
    return jobs, packed


def _progress(done: int, total: int, started: float, hosts: dict[str, int], busy: dict[str, str]) -> str:
    elapsed = time.monotonic() - started
    eta = ""
    if done:
        left = elapsed / done * (total - done)
        eta = t(f"，预计还需 {left:.0f}s", f", ETA {left:.0f}s")
    names = sorted(set(hosts) | set(busy.values()))
    workers = " ".join(f"{h}:{hosts.get(h, 0)}" + (t("（在批）", "(busy)") if h in busy.values() else "")
                       for h in names)
    return t(f"[{done}/{total} 个文件夹] 用时 {elapsed:.0f}s{eta}  批改机：{workers or '—（还没有 worker 接活）'}",
             f"[{done}/{total} folders] {elapsed:.0f}s elapsed{eta}  "
             f"workers: {workers or '— (no worker has taken any yet)'}")


def submit_and_collect(folders: list, lessons: list[str], out: Path, broker_url: str, result_url: str | None = None,
                       size_limit: int = SIZE_LIMIT, force: bool = False, timeout: float | None = None,
                       stream=sys.stderr, at: str | None = None) -> list:
    """Grade these folders on whatever workers serve the broker; write <name>.json and <name>.xml into
    `out` as `python -m checks grade` does, and return the students (checks.grade.Student) as it does.
    A folder graded before with the same bytes, lessons and kit is not sent again unless `force`.
    `timeout`: seconds to wait in all; folders not back by then get an error (None: wait until done).
    `at`: grade a git ref of each folder instead of its files (as local `grade --at`; "{NN}" in it: each
    lesson from its own commit, one task per lesson)."""
    import redis

    from checks import report
    from checks.cli import _load, _select
    data = _load()
    chosen = _select(data, lessons, allow_planned=lessons == ["all"])
    ids = [l["id"] for l in chosen]
    raws = [str(f) for f in folders]
    students = [grade.Student(raw, name) for raw, name in zip(raws, grade.student_names(raws))]
    configure(broker_url, result_url)
    store = _store()
    out = Path(out)
    started = time.monotonic()

    def finished(s, how: str) -> None:
        grade.write_reports(s, out)  # the local code path: same files, same shapes
        m = report.marks([c for r in s.results for c in r.checks])
        print(t(f"  完成 {s.name}：{m['score']}/{m['max_score']}（{s.seconds:.0f}s，{how}）",
                f"  done {s.name}: {m['score']}/{m['max_score']} ({s.seconds:.0f}s, {how})"), file=stream, flush=True)

    jobs, packed = pack_class(students, chosen, size_limit, kit_version(), at)
    order = {lid: n for n, lid in enumerate(ids)}

    def complete(s) -> bool:
        """Every part of the student back: their results, in lesson order, and their report files."""
        if s.parts and all(p.results is not None for p in s.parts):
            s.results = sorted((r for p in s.parts for r in p.results), key=lambda r: order[r.lesson["id"]])
            return True
        return not s.parts

    for s in students:
        if complete(s) and not any(p.student is s for group in jobs.values() for p in group):
            finished(s, t("未发送", "not sent"))
    try:
        for key, group in jobs.items():
            if force:
                store.delete(RESULTS + key, DELIVERIES + key)
            elif store.exists(RESULTS + key):
                continue  # graded before: same bytes, lessons and kit
            grade_folder.apply_async((key, group[0].student.name, base64.b64encode(packed[key]).decode("ascii"),
                                      group[0].lessons), queue=QUEUE, retry=True)
    except redis.RedisError as exc:
        raise UsageError(t(f"无法连接 broker：{exc}", f"cannot reach the broker: {exc}")) from None
    except Exception as exc:  # kombu's own connection errors
        raise UsageError(t(f"无法把任务交给 broker：{exc}", f"cannot hand the tasks to the broker: {exc}")) from None
    del packed

    pending, total = set(jobs), len(students)
    done = sum(1 for s in students if not any(p.student is s for g in jobs.values() for p in g))
    hosts: dict[str, int] = {}
    last_line, last_shown, warned = "", 0.0, False
    while pending:
        try:
            keys = sorted(pending)
            for key, value in zip(keys, store.mget([RESULTS + k for k in keys])):
                if value is None:
                    continue
                entry = json.loads(value)
                for part in jobs[key]:
                    s = part.student
                    part.results, error = wire_to_results(entry["result"], data, str(s.folder))
                    if error and not part.results:  # the worker could not start: every check, errored
                        part.results = grade.errored([l for l in chosen if l["id"] in part.lessons], error)
                    s.error = s.error or error
                    s.seconds = (s.seconds or 0) + entry["seconds"]
                    if complete(s):
                        finished(s, entry["worker"])
                        done += 1
                hosts[entry["worker"]] = hosts.get(entry["worker"], 0) + len(jobs[key])
                if entry["result"].get("retry"):
                    store.delete(RESULTS + key)  # a worker of another kit version: not this folder's verdict
                pending.discard(key)
            if pending and time.monotonic() - last_shown >= 2.0:
                busy = {}
                with store.pipeline() as pipe:
                    for k in sorted(pending):
                        pipe.lindex(DELIVERIES + k, -1)
                    for k, last in zip(sorted(pending), pipe.execute()):
                        if last:
                            busy[k] = json.loads(last)["host"]
                line = _progress(done, total, started, hosts, busy)
                if line != last_line:
                    print(line, file=stream, flush=True)
                last_line, last_shown, warned = line, time.monotonic(), False
        except redis.ConnectionError:
            if not warned:
                print(t("  broker 暂时连不上，继续等待……", "  the broker is unreachable for now, still waiting…"),
                      file=stream, flush=True)
            warned = True
        if timeout is not None and time.monotonic() - started > timeout:
            message = t(f"{timeout:.0f}s 内没有批改完（没有 worker？）", f"not graded within {timeout:.0f}s (no worker?)")
            for key in sorted(pending):
                for part in jobs[key]:
                    part.results = grade.errored([l for l in chosen if l["id"] in part.lessons], message)
                    part.student.error = message
                    if complete(part.student):
                        finished(part.student, t("超时", "timed out"))
            break
        if pending:
            time.sleep(0.5)
    return students


def print_table(students: list) -> None:
    """The score table `python -m checks grade` prints."""
    from checks import report
    print(t("学生                 得分      状态    扩展加分", "student              score     status  bonus"))
    for s in students:
        m = report.marks([c for r in s.results for c in r.checks])
        flag = t("  疑似篡改", "  tampering suspected") if any(c.tampered for r in s.results for c in r.checks) else ""
        print(f"{s.name:<20} {m['score']:>3}/{m['max_score']:<5} {grade.status_of(s):<7} +{m['bonus']}{flag}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.distributed",
                                     description="grade a class on several machines through a Celery broker")
    sub = parser.add_subparsers(dest="command", required=True)
    broker_help = "redis://:PASSWORD@HOST:PORT/0 (default: $LAB_GRADE_BROKER, which keeps it out of `ps`)"
    worker = sub.add_parser("worker", help="grade folders from the queue on this machine")
    worker.add_argument("--broker", default=os.environ.get("LAB_GRADE_BROKER"), help=broker_help)
    worker.add_argument("--result-backend", default=None, help="optional Celery result backend (task states)")
    worker.add_argument("-c", "--concurrency", type=int, default=1, help="folders at once (see the docs: ~1 per core)")
    worker.add_argument("-n", "--name", default=None, help="worker name, e.g. grader1@%%h")
    worker.add_argument("-l", "--loglevel", default="INFO")
    grade_p = sub.add_parser("grade", help="send a class to the workers and write the reports")
    grade_p.add_argument("--broker", default=os.environ.get("LAB_GRADE_BROKER"), help=broker_help)
    grade_p.add_argument("--result-backend", default=None)
    grade_p.add_argument("--lab", nargs="+", required=True, metavar="DIR")
    grade_p.add_argument("--lessons", nargs="+", default=["all"], metavar="NN")
    grade_p.add_argument("--out", default="grades", metavar="DIR")
    grade_p.add_argument("--size-limit", type=float, default=SIZE_LIMIT / 1024 / 1024, metavar="MB")
    grade_p.add_argument("--force", action="store_true", help="grade again even when the store has a result")
    grade_p.add_argument("--at", metavar="REF", help="grade this git ref of each folder ({NN}: the lesson's id)")
    grade_p.add_argument("--timeout", type=float, default=None, metavar="S", help="give up on folders after S seconds")
    args = parser.parse_args(argv)
    try:
        if not args.broker:
            raise UsageError(t("请给出 --broker URL 或设置 LAB_GRADE_BROKER", "give --broker URL or set LAB_GRADE_BROKER"))
        if args.command == "worker":
            run_worker(args.broker, args.concurrency, args.name, args.result_backend, loglevel=args.loglevel)
            return 0
        students = submit_and_collect(args.lab, args.lessons, Path(args.out), args.broker, args.result_backend,
                                      int(args.size_limit * 1024 * 1024), args.force, args.timeout, at=args.at)
        print_table(students)
        print(t(f"报告写在 {args.out}/", f"reports written to {args.out}/"))
        return grade.exit_code(students)
    except UsageError as exc:
        print(t("错误：", "error: ") + str(exc), file=sys.stderr)
        return 2


