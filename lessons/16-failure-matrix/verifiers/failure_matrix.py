"""Lesson 16's failure matrix, automated (kit script, not a lesson file).

    python failure_matrix.py [case …]     in a work dir made by the checker (it needs .env.tasks)

Each of the 15 rows of failure-matrix.md runs on a job of its own, created inside the row, and
injects exactly one fault:

    baseline   the previous row is over: no fault in place, broker up, nothing due, worker idle
    inject     one fault (recorded once; a row that tries a second one fails)
    recover    the component is restored and the learner's publisher/recovery/worker do the rest

The row's evidence is what the kit read, never what it expected: the job's states as polled from
export_jobs (every 20 ms), the deliveries the worker really ran (task start/end events written by
lab16_probe), attempts, result_ref and the artifact's sha256, and the recovery time.  Durable times
that can be set (lease_until, next_attempt_at, claim_until, dispatch times) are moved into the past
instead of waited for; the seconds moved are added to the measured wall time, so recovery_seconds
is what a real clock would have shown.  Rows not run are written as not_run; a row that raised or
whose claim did not hold is fail.  The record goes to $LAB_LOG_DIR/verification-record.json.

Everything runs against the learner's code: state_store, publisher.publish_one, recovery.recover_batch,
schedule_store.schedule_once, schedule_tasks.execution_slot, admission_adapter.accept_export,
api_db (when present) and the export task in a real Celery worker.  The broker is a private
redis-server started here (the broker row stops and restarts it, touching no one else's Redis);
results stay in the slot's result database.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

import pymysql

from shared.celerylab import LOG_DIR, WORK, redact, setting
from shared.i18n import t
from shared.labdb import db_settings
from shared.proc import Process, WaitTimeout, free_port, port_open, run_python, wait_until

EVENTS = LOG_DIR / "lab16-events.jsonl"
HOLD_LIST = LOG_DIR / "lab16-hold.txt"
FAIL_LIST = LOG_DIR / "lab16-fail-claim.txt"
RECORD = LOG_DIR / "verification-record.json"
MARKS = "lab16_kit_marks"
QUEUES = ("exports.fast", "exports.bulk")
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
RESULTS = ("pass", "fail", "not_run")
SCAN_PERIOD = 0.5      # how often the kit's recovery loop runs recover_batch
LEASE_BUDGET = 60.0    # an expired lease is back in processing within this (lesson budget)
QUEUED_BUDGET = 90.0   # a sent-but-unclaimed job is back in processing within this
RESULT_TTL = 2         # result_expires of the result-cache row's worker, in seconds


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def short(value) -> str:
    return f"{str(value)[:8]}…"


# ================================================================ the record: rules shared with 16.1

def _is_uuid(value) -> bool:
    try:
        UUID(str(value))
        return isinstance(value, str)
    except ValueError:
        return False


def _is_time(value) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def rows_of(document) -> list:
    """The case rows of a record: one object, a list of objects, or {"cases": [...]}. """
    if isinstance(document, dict) and isinstance(document.get("cases"), list):
        return document["cases"]
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        return [document]
    return []


def row_problems(row) -> list[str]:
    """Why this row cannot be trusted as written (empty list: it is consistent).

    pass     needs a real job_id (a UUID), an operation time, observed_states read from the job,
             recovery_seconds measured (a number >= 0) and a delivery count
    fail     ran, so it needs the time and what was seen or why it failed
    not_run  anything else: a row nobody ran never claims a result
    """
    if not isinstance(row, dict):
        return [t("行不是 JSON 对象", "the row is not a JSON object")]
    case = row.get("case")
    name = case if isinstance(case, str) and case else "?"
    problems = []
    if not isinstance(case, str) or not case.strip():
        problems.append(t("缺少 case 名称", "no case name"))
    result = row.get("result")
    if result not in RESULTS:
        return [*problems, t(f"{name}: result 只能是 pass/fail/not_run，实际 {result!r}",
                             f"{name}: result must be pass, fail or not_run, got {result!r}")]
    if result == "not_run":
        return problems
    if not _is_time(row.get("operated_at")):
        problems.append(t(f"{name}: {result} 需要实际操作时间 operated_at（ISO 8601）",
                          f"{name}: {result} needs the real operation time operated_at (ISO 8601)"))
    states = row.get("observed_states")
    if result == "pass":
        if not _is_uuid(row.get("job_id")):
            problems.append(t(f"{name}: pass 需要本次真实的 job_id（UUID），实际 {row.get('job_id')!r}",
                              f"{name}: pass needs this run's real job_id (a UUID), got {row.get('job_id')!r}"))
        if not (isinstance(states, list) and states and all(isinstance(s, str) and s for s in states)):
            problems.append(t(f"{name}: pass 需要读到的 observed_states（非空列表），不能留空",
                              f"{name}: pass needs the observed_states actually read (a non-empty list)"))
        elif not any(s in STATUSES for s in states):
            problems.append(t(f"{name}: observed_states 里没有任何真实状态（{', '.join(STATUSES)}）",
                              f"{name}: observed_states holds no real status ({', '.join(STATUSES)})"))
        seconds = row.get("recovery_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            problems.append(t(f"{name}: pass 需要实测的 recovery_seconds（>= 0 的数），实际 {seconds!r}",
                              f"{name}: pass needs a measured recovery_seconds (a number >= 0), got {seconds!r}"))
        deliveries = row.get("duplicate_deliveries")
        if isinstance(deliveries, bool) or not isinstance(deliveries, int) or deliveries < 0:
            problems.append(t(f"{name}: pass 需要数出来的 duplicate_deliveries（整数），实际 {deliveries!r}",
                              f"{name}: pass needs a counted duplicate_deliveries (an integer), got {deliveries!r}"))
        digest = row.get("artifact_sha256")
        if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                       and all(ch in "0123456789abcdef" for ch in digest)):
            problems.append(t(f"{name}: artifact_sha256 应为 64 位十六进制或 null",
                              f"{name}: artifact_sha256 must be 64 hex digits or null"))
    else:  # fail: it ran; say what happened
        if not (states or row.get("notes") or row.get("error")):
            problems.append(t(f"{name}: fail 需要看到的状态或失败原因（observed_states / notes）",
                              f"{name}: fail needs what was seen or why (observed_states / notes)"))
    return problems


# ================================================================ the kit's view of the database

# One kept-open connection per thread: the kit reads the database hundreds of times per run, and
# every new PyMySQL connection costs a TLS context (tens of milliseconds on this machine).
_local = threading.local()


def _kit_connection():
    conn = getattr(_local, "conn", None)
    if conn is None or not conn.open:
        from pymysql.cursors import DictCursor
        conn = pymysql.connect(**db_settings(), charset="utf8mb4", cursorclass=DictCursor, autocommit=True,
                               connect_timeout=3, read_timeout=15, write_timeout=15)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        _local.conn = conn
    return conn


@contextlib.contextmanager
def kit_db():
    """A cursor on this thread's kit connection (autocommit: every statement sees the latest commits)."""
    conn = _kit_connection()
    try:
        with conn.cursor() as cur:
            yield cur
    except pymysql.OperationalError:
        _local.conn = None  # a broken link: the next call reconnects
        with contextlib.suppress(Exception):
            conn.close()
        raise


def close_kit_connection() -> None:
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


def sql(query: str, args=()) -> list[dict]:
    with kit_db() as cur:
        cur.execute(query, args)
        return list(cur.fetchall())


def job_row(job_id: str) -> dict | None:
    rows = sql("SELECT id, status, attempts, lease_token, lease_until, next_attempt_at, last_dispatched_at, "
               "cancel_requested, deadline_at, result_ref, error_code, payload, NOW(6) AS now "
               "FROM export_jobs WHERE id=%s", (job_id,))
    return rows[0] if rows else None


def status_of(job_id: str) -> str | None:
    row = job_row(job_id)
    return row and row["status"]


def events_of(job_id: str) -> list[dict]:
    return sql("SELECT id, sent_at, available_at, claim_until, created_at, NOW(6) AS now FROM export_outbox "
               "WHERE job_id=%s ORDER BY created_at, id", (job_id,))


def pending_of(job_id: str) -> list[dict]:
    return [e for e in events_of(job_id) if e["sent_at"] is None]


def dead_letters(job_id: str) -> list[dict]:
    return sql("SELECT job_id, reason FROM export_dead_letters WHERE job_id=%s", (job_id,))


def counts() -> tuple[int, int]:
    row = sql("SELECT (SELECT COUNT(*) FROM export_jobs) AS jobs, (SELECT COUNT(*) FROM export_outbox) AS events")[0]
    return int(row["jobs"]), int(row["events"])


def active_jobs() -> int:
    return int(sql("SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')")[0]["n"])


def due_events() -> int:
    return int(sql("SELECT COUNT(*) AS n FROM export_outbox WHERE sent_at IS NULL AND available_at<=NOW(6) "
                   "AND (claim_until IS NULL OR claim_until<NOW(6))")[0]["n"])


def seconds_until(job_id: str, column: str) -> float:
    """How far in the future export_jobs.<column> of this job is (0 when past or NULL)."""
    rows = sql(f"SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), {column}) AS us FROM export_jobs WHERE id=%s", (job_id,))
    us = rows[0]["us"] if rows else None
    return max(0.0, (us or 0) / 1e6)


def payload_of(row: dict):
    value = row["payload"]
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def artifact_evidence(job: dict) -> tuple[str, str]:
    """(sha256, path) of a succeeded job's file, after the kit's own checks: inside artifacts/, JSON == payload."""
    ref = job.get("result_ref")
    assert ref, t(f"任务 {short(job['id'])} succeeded 却没有 result_ref",
                  f"job {short(job['id'])} succeeded without result_ref")
    root = (WORK / "artifacts").resolve()
    path = Path(ref)
    target = (path if path.is_absolute() else WORK / path).resolve()
    assert target.is_relative_to(root), t(f"结果文件不在 artifacts 内：{ref}", f"the artifact is outside artifacts: {ref}")
    assert target.is_file(), t(f"result_ref 指向的文件不存在：{ref}", f"result_ref points at no file: {ref}")
    data = target.read_bytes()
    try:
        content = json.loads(data)
    except ValueError:
        raise AssertionError(t(f"结果文件不是 JSON：{ref}", f"the artifact is not JSON: {ref}")) from None
    assert content == payload_of(job), t(f"结果文件内容与 payload 不同：{ref}",
                                         f"the artifact's content differs from the payload: {ref}")
    return hashlib.sha256(data).hexdigest(), str(target.relative_to(WORK))


def advance(job_ids, seconds: float) -> float:
    """Let `seconds` pass for these jobs only: every durable time of the job and its events moves back.

    Used instead of waiting: a lease running out, a backoff ending, a dispatch growing old.  The
    caller adds the seconds to its measured time, so the evidence shows what a real clock would."""
    if isinstance(job_ids, str):
        job_ids = [job_ids]
    us = int(round(seconds * 1e6))
    if us <= 0:
        return 0.0
    marks = ",".join(["%s"] * len(job_ids))
    shift = "{0}=DATE_SUB({0}, INTERVAL %s MICROSECOND)"
    with kit_db() as cur:
        cols = ("created_at", "updated_at", "next_attempt_at", "lease_until", "last_dispatched_at", "deadline_at")
        cur.execute(f"UPDATE export_jobs SET {', '.join(shift.format(c) for c in cols)} WHERE id IN ({marks})",
                    [us] * len(cols) + list(job_ids))
        cols = ("created_at", "available_at", "sent_at", "claim_until")
        cur.execute(f"UPDATE export_outbox SET {', '.join(shift.format(c) for c in cols)} WHERE job_id IN ({marks})",
                    [us] * len(cols) + list(job_ids))
    return us / 1e6


def park(job_ids) -> None:
    """Take leftover jobs out of every later path (a failed row's or a check's own): failed, nothing due."""
    if not job_ids:
        return
    marks = ",".join(["%s"] * len(job_ids))
    with kit_db() as cur:
        cur.execute(f"UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE sent_at IS NULL "
                    f"AND job_id IN ({marks})", list(job_ids))
        cur.execute(f"UPDATE export_jobs SET status='failed', error_code='lab16_parked', lease_token=NULL, "
                    f"lease_until=NULL, result_ref=NULL WHERE status IN ('queued','running') AND id IN ({marks})",
                    list(job_ids))


# ---------------------------------------------------------------- kit triggers (faults in the database)

def _marks_table() -> None:
    sql(f"CREATE TABLE IF NOT EXISTS {MARKS} (kind VARCHAR(16) NOT NULL, ref CHAR(36) CHARACTER SET ascii "
        "NOT NULL, PRIMARY KEY (kind, ref)) ENGINE=InnoDB")


@contextlib.contextmanager
def trigger(name: str, body: str, kind: str, ref: str):
    """A kit trigger that fires only for (kind, ref) in the marks table; dropped and unmarked afterwards."""
    _marks_table()
    sql(f"DROP TRIGGER IF EXISTS {name}")
    sql(f"DELETE FROM {MARKS}")
    sql(f"INSERT INTO {MARKS} (kind, ref) VALUES (%s, %s)", (kind, ref))
    try:
        sql(body)
    except pymysql.MySQLError as exc:
        sql(f"DELETE FROM {MARKS}")
        raise AssertionError(t(f"检查器无法创建触发器（错误 {exc.args[0]}）：账号需要 TRIGGER 权限",
                               f"the checker cannot create its trigger (error {exc.args[0]}): the account needs "
                               "the TRIGGER privilege")) from None
    try:
        yield
    finally:
        sql(f"DROP TRIGGER IF EXISTS {name}")
        sql(f"DELETE FROM {MARKS}")


def drop_kit_triggers() -> None:
    for name in ("lab16_kit_fail_outbox", "lab16_kit_fail_confirm"):
        sql(f"DROP TRIGGER IF EXISTS {name}")
    with contextlib.suppress(pymysql.MySQLError):
        sql(f"DELETE FROM {MARKS}")


# ---------------------------------------------------------------- worker events (lab16_probe)

def probe_events() -> list[dict]:
    try:
        lines = EVENTS.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            found.append(json.loads(line))
    return found


def deliveries(job_id: str, kind: str = "start") -> list[dict]:
    return [e for e in probe_events() if e.get("kind") == kind and e.get("task") == "products.export"
            and (e.get("args") or [None])[:1] == [job_id]]


def ended(job_id: str) -> list[dict]:
    ids = {(d["task_id"], d["pid"]) for d in deliveries(job_id)}
    return [e for e in probe_events() if e.get("kind") == "end" and (e.get("task_id"), e.get("pid")) in ids]


def holds(job_id: str) -> list[dict]:
    return [e for e in probe_events() if e.get("kind") == "hold" and e.get("job") == job_id]


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def open_deliveries() -> list[dict]:
    """Task starts with no end whose process still lives (a killed child's start stays open forever)."""
    events = probe_events()
    done = {(e.get("task_id"), e.get("pid")) for e in events if e.get("kind") == "end"}
    return [e for e in events if e.get("kind") == "start" and (e.get("task_id"), e.get("pid")) not in done
            and pid_alive(e["pid"])]


def _add_line(path: Path, value: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(value + "\n")


def hold(job_id: str) -> None:
    _add_line(HOLD_LIST, job_id)


def release(job_id: str) -> None:
    (LOG_DIR / f"lab16-release-{job_id}").write_text("go")


def fail_claim(job_id: str) -> None:
    _add_line(FAIL_LIST, job_id)


# ================================================================ the environment: broker, workers, learner code

class StateWatcher(threading.Thread):
    """Polls export_jobs every 20 ms for the jobs it is told about and keeps each status change."""

    def __init__(self):
        super().__init__(daemon=True, name="lab16-state-watcher")
        self.jobs: dict[str, list[tuple[float, str, int]]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: str | None = None

    def watch(self, job_id: str) -> None:
        with self.lock:
            self.jobs.setdefault(job_id, [])
        self.poll_once()

    def seen(self, job_id: str) -> list[tuple[float, str, int]]:
        with self.lock:
            return list(self.jobs.get(job_id, []))

    def poll_once(self, cur=None) -> None:
        with self.lock:
            ids = list(self.jobs)
        if not ids:
            return
        marks = ",".join(["%s"] * len(ids))
        query = f"SELECT id, status, attempts FROM export_jobs WHERE id IN ({marks})"
        if cur is None:
            rows = sql(query, ids)
        else:
            cur.execute(query, ids)
            rows = cur.fetchall()
        stamp = time.monotonic()
        with self.lock:
            for row in rows:
                history = self.jobs.setdefault(row["id"], [])
                if not history or history[-1][1:] != (row["status"], row["attempts"]):
                    history.append((stamp, row["status"], row["attempts"]))

    def run(self) -> None:
        try:
            with kit_db() as cur:
                while not self.stopping.is_set():
                    self.poll_once(cur)
                    self.stopping.wait(0.02)
        except Exception as exc:  # noqa: BLE001 - reported with the evidence, never silent
            self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)


# The result-cache row's own publisher: the learner's publish_one in a process of its own whose
# CELERY_BROKER_URL is the cache worker's broker database.  Started with the workers (importing Celery
# takes a while), it waits for a go file, publishes once and writes what happened.
CACHE_PUBLISHER = r"""
import json, os, sys, time
folder = sys.argv[1]
from publisher import publish_one
open(os.path.join(folder, "ready"), "w").close()
give_up = time.monotonic() + 600
while not os.path.exists(os.path.join(folder, "go")):
    if time.monotonic() > give_up:
        sys.exit(3)
    time.sleep(0.01)
try:
    out = {"published": bool(publish_one())}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
with open(os.path.join(folder, ".result"), "w") as handle:
    json.dump(out, handle)
os.replace(os.path.join(folder, ".result"), os.path.join(folder, "result"))
"""


def _redis_binary() -> str | None:
    return shutil.which("redis-server", path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin:/usr/bin")


class Lab:
    """One private broker, the matrix's worker(s), the learner's modules in this process.

    The broker is a redis-server on a free loopback port, owned here (by PID), with AOF on so a
    restart keeps what it held.  Results stay in the slot's result database (CELERY_RESULT_BACKEND
    from .env.tasks), so a publisher never waits on a result backend that is down.
    """

    def __init__(self, cache_worker: bool = False):
        self.cache_worker_wanted = cache_worker
        self.redis: Process | None = None
        self.redis_argv: list[str] = []
        self.port = 0
        self.broker_url = ""
        self.cache_url = ""
        self.private = False
        self.worker: Process | None = None
        self.cache_worker: Process | None = None
        self.cache_publisher: Process | None = None
        self.cache_folder = LOG_DIR / "lab16-cache-publisher"
        self.watcher = StateWatcher()
        self.modules: dict = {}
        self.started = False
        self.setup_seconds = 0.0
        self._redis_client = None

    # ------------------------------------------------------------ start and stop

    def start(self) -> None:
        started = time.monotonic()
        for path in (EVENTS, HOLD_LIST, FAIL_LIST):
            path.unlink(missing_ok=True)
        # LAB16_BROKER=slot forces the fallback (the slot's own broker database), as with docker services.
        binary = None if os.environ.get("LAB16_BROKER") == "slot" else _redis_binary()
        if binary:
            self.private = True
            self.port = free_port()
            folder = LOG_DIR / "lab16-broker"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            self.redis_argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "yes", "--appendfsync", "always", "--dir", str(folder)]
            self.broker_start()
            self.broker_url = f"redis://127.0.0.1:{self.port}/0"
            self.cache_url = f"redis://127.0.0.1:{self.port}/1"
        else:  # docker/external services with no redis-server here: the slot's own broker database
            self.broker_url = setting("CELERY_BROKER_URL") or ""
            self.cache_url = ""
        assert self.broker_url, t("没有 CELERY_BROKER_URL", "CELERY_BROKER_URL is missing")
        # The learner's celery_app reads the environment first (load_dotenv never overrides it).
        os.environ["CELERY_BROKER_URL"] = self.broker_url
        env = dict(os.environ)
        node = f"lab16-{os.getpid()}"
        argv = [sys.executable, "-m", "celery", "-A", "lab16_probe:app", "worker", "-l", "INFO",
                "-Q", ",".join(QUEUES), "--without-mingle", "--without-gossip", "--without-heartbeat"]
        if not self.private:  # no second broker database: this worker keeps results briefly itself
            env["LAB16_RESULT_EXPIRES"] = str(RESULT_TTL)
        self.worker = Process([*argv, "--concurrency=2", "-n", f"{node}-main@%h"], cwd=WORK,
                              log_path=LOG_DIR / "lab16-worker.log", env=env)
        if self.cache_worker_wanted and self.private:
            cache_env = dict(env, CELERY_BROKER_URL=self.cache_url, LAB16_RESULT_EXPIRES=str(RESULT_TTL))
            self.cache_worker = Process([*argv, "--pool=solo", "-n", f"{node}-cache@%h"], cwd=WORK,
                                        log_path=LOG_DIR / "lab16-cache-worker.log", env=cache_env)
            shutil.rmtree(self.cache_folder, ignore_errors=True)
            self.cache_folder.mkdir(parents=True)
            script = self.cache_folder / "cache_publisher.py"
            script.write_text(CACHE_PUBLISHER, encoding="utf-8")
            pub_env = dict(cache_env, PYTHONPATH=os.pathsep.join([str(WORK), os.environ.get("PYTHONPATH", "")]))
            pub_env.pop("LAB16_RESULT_EXPIRES", None)
            self.cache_publisher = Process([sys.executable, str(script), str(self.cache_folder)], cwd=WORK,
                                           log_path=self.cache_folder / "publisher.log", env=pub_env)
        for proc in (self.worker, self.cache_worker):
            if proc is not None:
                proc.wait_ready(45, log_contains=" ready.")
        if self.cache_publisher is not None:
            wait_until(lambda: (self.cache_folder / "ready").exists() or not self.cache_publisher.alive(), 45,
                       "the result-cache row's publisher to start", interval=0.05)
            assert (self.cache_folder / "ready").exists(), t(
                "result-cache 行的 publisher 没有启动：", "the result-cache row's publisher did not start: ") + \
                redact(self.cache_publisher.log_tail(5))
        self._import_learner()
        self.watcher.start()
        self.started = True
        self.setup_seconds = time.monotonic() - started

    def _import_learner(self) -> None:
        loaded = sys.modules.get("celery_app")
        if loaded is not None:  # imported earlier in this process: point it at this broker too
            loaded.app.conf.broker_url = self.broker_url
        for name in ("state_store", "publisher", "recovery"):
            self.modules[name] = learner(name)

    def stop(self) -> None:
        self.watcher.stop()
        for proc in (self.cache_publisher, self.worker, self.cache_worker):
            if proc is not None:
                proc.stop(grace=10)
        close_kit_connection()
        if self._redis_client is not None:
            with contextlib.suppress(Exception):
                self._redis_client.close()
        if self.redis is not None:
            self.redis.stop(grace=5)

    def __getattr__(self, name):  # lab.state_store, lab.publisher, lab.recovery
        modules = self.__dict__.get("modules") or {}
        if name in modules:
            return modules[name]
        raise AttributeError(name)

    # ------------------------------------------------------------ the private broker

    def broker_client(self, url: str | None = None):
        import redis
        return redis.Redis.from_url(url or self.broker_url, socket_connect_timeout=2, socket_timeout=3)

    def _client(self):
        if self._redis_client is None:
            self._redis_client = self.broker_client()
        return self._redis_client

    def broker_ping(self) -> bool:
        try:
            return bool(self._client().ping())
        except Exception:  # noqa: BLE001 - any failure means "not answering"
            return False

    def broker_start(self) -> None:
        self.redis = Process(self.redis_argv, cwd=WORK, log_path=LOG_DIR / "lab16-broker.log")
        self.redis.wait_ready(10, port=self.port)
        wait_until(lambda: self.broker_ping() if self.broker_url else port_open(self.port), 10,
                   "the private broker to answer", interval=0.05)

    def broker_stop(self) -> int:
        assert self.redis is not None
        pid = self.redis.pid
        self.redis.stop(grace=5)
        wait_until(lambda: not port_open(self.port), 10, "the private broker to stop listening", interval=0.05)
        return pid

    def broker_idle(self) -> bool:
        if not self.broker_ping():
            return False
        client = self._client()
        waiting = sum(client.llen(q) for q in QUEUES)
        return waiting == 0 and client.hlen("unacked") == 0

    # ------------------------------------------------------------ publisher and recovery, driven here

    def pump(self, limit: int = 40) -> int:
        """python publisher.py, in this process: publish_one until nothing is due."""
        sent = 0
        for _ in range(limit):
            if self.publisher.publish_one():
                sent += 1
            elif not due_events():
                break
        return sent

    def scan(self) -> int:
        return int(self.recovery.recover_batch() or 0)

    def wait_idle(self, seconds: float = 20) -> None:
        wait_until(lambda: self.broker_idle() and not open_deliveries(), seconds,
                   "the worker to finish its messages", interval=0.05)

    def drain(self, seconds: float = 30) -> None:
        """Publish what is due and let the worker finish it, until nothing is left to do."""
        deadline = time.monotonic() + seconds
        while True:
            self.pump()
            self.wait_idle(max(1.0, deadline - time.monotonic()))
            if not due_events():
                return
            assert time.monotonic() < deadline, t("事件一直在到期，无法排空", "events keep coming due; cannot drain")

    def wait_status(self, job_id: str, wanted, seconds: float = 20) -> dict:
        wanted = (wanted,) if isinstance(wanted, str) else tuple(wanted)
        try:
            return wait_until(lambda: (lambda r: r if r and r["status"] in wanted else None)(job_row(job_id)),
                              seconds, f"job {job_id} to be {'/'.join(wanted)}", interval=0.05)
        except WaitTimeout:
            row = job_row(job_id)
            raise AssertionError(t(f"任务 {short(job_id)} 在 {seconds:g} 秒内没有变成 {'/'.join(wanted)}"
                                   f"（现在 {row and row['status']}，attempts {row and row['attempts']}）",
                                   f"job {short(job_id)} did not become {'/'.join(wanted)} within {seconds:g}s "
                                   f"(now {row and row['status']}, attempts {row and row['attempts']})")) from None

    def wait_ended(self, job_id: str, n: int, seconds: float = 20) -> list[dict]:
        try:
            wait_until(lambda: len(ended(job_id)) >= n, seconds, f"{n} deliveries of {job_id}", interval=0.05)
        except WaitTimeout:
            raise AssertionError(t(f"worker 在 {seconds:g} 秒内只执行完任务 {short(job_id)} 的 {len(ended(job_id))} 次投递"
                                   f"（应至少 {n} 次）",
                                   f"within {seconds:g}s the worker finished {len(ended(job_id))} deliveries of job "
                                   f"{short(job_id)} (expected at least {n})")) from None
        return ended(job_id)

    def product(self, n: int = 1) -> list[int]:
        rows = sql("SELECT id FROM products WHERE is_active=1 ORDER BY id LIMIT %s", (n,))
        return [int(r["id"]) for r in rows]


def learner(module: str):
    """Import one of the learner's modules; a failure is the learner's to see, secrets masked."""
    try:
        return __import__(module)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(t(f"无法导入 {module}：{type(exc).__name__}: {redact(str(exc))}",
                               f"cannot import {module}: {type(exc).__name__}: {redact(str(exc))}")) from None


# ================================================================ one row: baseline → inject → recover

class Row:
    """What one row did and saw.  The case function drives it; the evidence is filled from real reads."""

    def __init__(self, case: Case, lab: Lab):
        self.case, self.lab = case, lab
        self.jobs: list[str] = []
        self.known: set[str] = set()
        self.labels: list[tuple[float, str]] = []
        self.notes: list[str] = []
        self.phases: dict[str, str] = {}
        self.faults: list[str] = []
        self.operated_at: str | None = None
        self.t_fault: float | None = None
        self.t_clock: float | None = None   # where recovery is measured from (the fault, unless moved)
        self.skipped = 0.0                   # durable seconds moved instead of waited (counted)
        self.setup_moved = 0.0               # seconds moved to set the scene (not part of recovery)
        self.recovery_seconds: float | None = None
        self.measured_seconds: float | None = None
        self.baseline: dict = {}
        self.extra: dict = {}

    # --- the job(s) of this row
    def job(self, job_id: str) -> str:
        assert job_id not in self.known, t(f"任务 {short(job_id)} 在本行开始前就存在（不是新任务）",
                                           f"job {short(job_id)} existed before this row (not a fresh job)")
        if job_id not in self.jobs:
            self.jobs.append(job_id)
            self.lab.watcher.watch(job_id)
        return job_id

    def submit(self, product_ids: list[int] | None = None) -> str:
        return self.job(self.lab.state_store.submit_snapshot(product_ids or self.products()))

    def products(self) -> list[int]:
        index = [c.id for c in CASES].index(self.case.id) if self.case is not None else 0
        return [int(sql("SELECT id FROM products ORDER BY id LIMIT 1 OFFSET %s", (index % 25,))[0]["id"])]

    # --- phases
    @contextlib.contextmanager
    def fault(self, text: str):
        assert not self.faults, t("一行只能注入一个故障", "a row may inject one fault only")
        self.faults.append(text)
        self.operated_at = self.phases["inject"] = now_iso()
        self.t_fault = self.t_clock = time.monotonic()
        yield

    def recover(self) -> None:
        self.phases["recover"] = now_iso()

    def clock_from_here(self) -> None:
        """Recovery is measured from now (e.g. the moment the lease ran out), not from the fault."""
        self.t_clock = time.monotonic()
        self.skipped = 0.0

    def recovered(self) -> None:
        assert self.t_clock is not None, "recovered() before the fault"
        self.phases["recovered"] = now_iso()
        self.measured_seconds = round(time.monotonic() - self.t_clock, 3)
        self.recovery_seconds = round(self.measured_seconds + self.skipped, 3)

    def advance(self, job_ids, seconds: float, setup: bool = False) -> float:
        moved = advance(job_ids, seconds)
        if setup:
            self.setup_moved += moved
        else:
            self.skipped += moved
        return moved

    # --- evidence
    def observe(self, label: str) -> None:
        self.labels.append((time.monotonic(), label))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def expect(self, condition, zh: str, en: str) -> None:
        if not condition:
            raise AssertionError(t(zh, en))

    def observed_states(self) -> list[str]:
        main = self.jobs[0] if self.jobs else None
        self.lab.watcher.poll_once()  # the latest state too, not only what the last 20 ms poll saw
        seen = [(stamp, status) for stamp, status, _ in self.lab.watcher.seen(main)] if main else []
        merged = sorted(seen + self.labels, key=lambda item: item[0])
        return [label for _, label in merged]


def scan_until(lab: Lab, job_id: str, wanted: tuple[str, ...], seconds: float = 10) -> dict:
    """The kit's recovery loop: recover_batch every SCAN_PERIOD until the job reaches a wanted state."""
    def step():
        row = job_row(job_id)
        if row and row["status"] in wanted:
            return row
        lab.scan()
        row = job_row(job_id)
        if row and row["status"] in wanted:
            return row
        time.sleep(SCAN_PERIOD)
        return None
    try:
        return wait_until(step, seconds, f"recovery to make {job_id} {'/'.join(wanted)}", interval=0)
    except WaitTimeout:
        row = job_row(job_id)
        raise AssertionError(t(f"recover_batch 运行 {seconds:g} 秒后任务 {short(job_id)} 仍是 {row and row['status']}"
                               f"（应为 {'/'.join(wanted)}）",
                               f"after {seconds:g}s of recover_batch job {short(job_id)} is still "
                               f"{row and row['status']} (expected {'/'.join(wanted)})")) from None


def age_until_requeued(row: Row, job_id: str, start: float = 55.0, step: float = 1.0, limit: float = 300.0) -> float:
    """Let the dispatch grow old (moved, 1 s per step from 55 s) with a scan after each step, until
    recovery gives the job a new pending event.  Returns the age at which it did.  Time moved before
    the row's fault is scene-setting; after it, it counts towards recovery."""
    setup = row.t_fault is None
    before = {e["id"] for e in events_of(job_id)}
    age = row.advance(job_id, start, setup=setup)
    while True:
        row.lab.scan()
        if any(e["id"] not in before for e in pending_of(job_id)):
            return age
        if age >= limit:
            raise AssertionError(t(f"派发 {limit:g} 秒后恢复扫描仍没有给任务 {short(job_id)} 新事件",
                                   f"{limit:g}s after the dispatch the recovery scan still gave job "
                                   f"{short(job_id)} no new event"))
        age += row.advance(job_id, step, setup=setup)


def pump_until(lab: Lab, job_id: str, condition, seconds: float = 15) -> dict:
    """Publish what is due until the job satisfies condition(row)."""
    def step():
        lab.pump()
        row = job_row(job_id)
        return row if row and condition(row) else None
    try:
        return wait_until(step, seconds, f"job {job_id} to be picked up again", interval=0.05)
    except WaitTimeout:
        row = job_row(job_id)
        raise AssertionError(t(f"任务 {short(job_id)} 在 {seconds:g} 秒内没有被重新领取（现在 {row and row['status']}，"
                               f"attempts {row and row['attempts']}）",
                               f"job {short(job_id)} was not picked up again within {seconds:g}s (now "
                               f"{row and row['status']}, attempts {row and row['attempts']})")) from None


def stranded(lab: Lab, job_id: str) -> bool:
    """Delivered, yet nobody holds it: queued and due, its events all sent, every delivery over, nothing
    in the broker.  (A delivery that found the row locked for a moment claims nothing and is used up.)"""
    row = job_row(job_id)
    if not row or row["status"] != "queued" or pending_of(job_id) or not deliveries(job_id):
        return False
    if seconds_until(job_id, "next_attempt_at") > 0:
        return False
    if any((e.get("args") or [None])[:1] == [job_id] for e in open_deliveries()):
        return False
    return lab.broker_idle() and len(ended(job_id)) >= len(deliveries(job_id))


def redispatch_stranded(row: Row, job_id: str) -> None:
    """The system's own answer to a stranded job: the unclaimed scan re-dispatches it after 60 s (moved)."""
    age = age_until_requeued(row, job_id)
    row.note(t(f"投递结束后任务仍 queued、事件已发、无人持有（claim 撞上了短暂的行锁？）：未领取恢复在 {age:.0f} 秒后重新派发"
               "（时间已计入）", f"after its delivery the job was still queued with its event sent and nobody holding it "
               f"(the claim met a briefly locked row?): the unclaimed recovery re-dispatched it after {age:.0f} s "
               "(time counted)"))
    row.lab.pump()


def await_hold(row: Row, job_id: str, seconds: float = 15) -> dict:
    """Publish until the worker is holding this job's write (lab16_probe); a stranded delivery is
    re-dispatched by the unclaimed recovery path first."""
    lab = row.lab
    for _ in range(3):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            lab.pump()
            held = holds(job_id)
            if held:
                return held[0]
            if stranded(lab, job_id):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(t(f"worker 在 {seconds:g} 秒内没有开始写任务 {short(job_id)} 的文件",
                                   f"the worker did not start writing job {short(job_id)}'s file within {seconds:g}s"))
        redispatch_stranded(row, job_id)
    raise AssertionError(t(f"任务 {short(job_id)} 被重新派发两次仍没有人领取", f"job {short(job_id)} was re-dispatched twice and "
                           "still nobody claimed it"))


def settle(row: Row, job_id: str, wanted=("succeeded",), seconds: float = 20, condition=None) -> dict:
    """Wait for the job (publishing what is due); a stranded job goes through the unclaimed recovery
    path instead of being waited on forever, and the row says so.  At most two such re-dispatches."""
    wanted = (wanted,) if isinstance(wanted, str) else tuple(wanted)
    done = condition or (lambda r: r["status"] in wanted)
    lab = row.lab
    for _ in range(3):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            lab.pump()
            current = job_row(job_id)
            if current and done(current):
                return current
            if stranded(lab, job_id):
                break
            time.sleep(0.05)
        else:
            current = job_row(job_id)
            raise AssertionError(t(f"任务 {short(job_id)} 在 {seconds:g} 秒内没有到达预期状态（现在 {current and current['status']}，"
                                   f"attempts {current and current['attempts']}）",
                                   f"job {short(job_id)} did not reach the expected state within {seconds:g}s (now "
                                   f"{current and current['status']}, attempts {current and current['attempts']})"))
        redispatch_stranded(row, job_id)
    raise AssertionError(t(f"任务 {short(job_id)} 被重新派发两次仍没有人领取", f"job {short(job_id)} was re-dispatched twice and "
                           "still nobody claimed it"))


def claim_seconds_left(job_id: str) -> float:
    rows = sql("SELECT MAX(TIMESTAMPDIFF(MICROSECOND, NOW(6), claim_until)) AS us FROM export_outbox "
               "WHERE job_id=%s AND sent_at IS NULL", (job_id,))
    return max(0.0, (rows[0]["us"] or 0) / 1e6)


# ================================================================ the 15 cases

def case_commit_fault(row: Row, lab: Lab) -> None:
    body = f"""CREATE TRIGGER lab16_kit_fail_outbox BEFORE INSERT ON export_outbox FOR EACH ROW
               BEGIN
                 IF EXISTS (SELECT 1 FROM {MARKS} WHERE kind='fail-outbox') THEN
                   SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lab16 drill: the outbox insert fails before commit';
                 END IF;
               END"""
    before = counts()
    with row.fault(t("outbox INSERT 在提交前失败（套件触发器），job INSERT 已执行",
                     "the outbox INSERT fails before the commit (kit trigger), after the job INSERT")):
        raised = None
        with trigger("lab16_kit_fail_outbox", body, "fail-outbox", "all"):
            try:
                lab.state_store.submit_snapshot(row.products())
            except Exception as exc:  # noqa: BLE001 - any exception is what the drill expects
                raised = exc
        after = counts()
        row.observe("absent")
        row.note(t(f"submit_snapshot → {type(raised).__name__ if raised else '没有异常'}；任务 {before[0]}→{after[0]}，"
                   f"事件 {before[1]}→{after[1]}",
                   f"submit_snapshot → {type(raised).__name__ if raised else 'no exception'}; jobs {before[0]}→"
                   f"{after[0]}, events {before[1]}→{after[1]}"))
        row.expect(raised is not None, "outbox 插入失败时 submit_snapshot 没有抛异常",
                   "submit_snapshot raised nothing although the outbox insert failed")
        row.expect(after == before, "异常后留下了任务或事件：job 与 outbox 没有一起回滚",
                   "rows were left behind: the job and the outbox event did not roll back together")
    row.recover()
    job = row.submit()
    settle(row, job)
    row.recovered()


def case_broker_down(row: Row, lab: Lab) -> None:
    if lab.private:
        with row.fault(t("私有 broker（redis-server）已停止", "the private broker (redis-server) is stopped")):
            pid = lab.broker_stop()
            job = row.submit()
            error = None
            try:
                lab.publisher.publish_one()
            except Exception as exc:  # noqa: BLE001
                error = exc
            row.note(t(f"broker pid {pid} 已停止；submit → {short(job)} queued；publish_one → "
                       f"{type(error).__name__ if error else '没有异常'}",
                       f"broker pid {pid} stopped; submit → {short(job)} queued; publish_one → "
                       f"{type(error).__name__ if error else 'no exception'}"))
    else:  # no redis-server binary here: only this publisher is pointed at a port nobody listens on
        with row.fault(t("publisher 指向一个没有 broker 的端口", "the publisher points at a port with no broker")):
            job = row.submit()
            closed = free_port()
            done = run_python(["publisher.py"], cwd=WORK, timeout=40,
                              env=dict(os.environ, CELERY_BROKER_URL=f"redis://127.0.0.1:{closed}/0"))
            error = None if done.returncode == 0 and "True" in done.stdout else RuntimeError("publish failed")
    event = events_of(job)
    row.expect(error is not None, "broker 不可用时 publish_one 没有报错（吞掉了发送异常？）",
               "publish_one reported no error with the broker down (send error swallowed?)")
    row.expect(len(event) == 1 and event[0]["sent_at"] is None,
               "broker 不可用时事件必须保留且 sent_at 为 NULL", "with the broker down the event must stay, sent_at NULL")
    row.expect(status_of(job) == "queued", "broker 不可用时任务应保持 queued", "with the broker down the job must stay queued")
    row.observe("queued+unsent")
    row.recover()
    if lab.private:
        lab.broker_start()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the failed publisher's claim runs out
    settle(row, job)
    row.recovered()


def case_publish_before_mark(row: Row, lab: Lab) -> None:
    job = row.submit()
    event = pending_of(job)[0]["id"]
    body = f"""CREATE TRIGGER lab16_kit_fail_confirm BEFORE UPDATE ON export_outbox FOR EACH ROW
               BEGIN
                 IF NEW.sent_at IS NOT NULL AND OLD.sent_at IS NULL
                    AND EXISTS (SELECT 1 FROM {MARKS} WHERE kind='fail-confirm' AND ref=OLD.id) THEN
                   SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lab16 drill: the confirm write is lost';
                 END IF;
               END"""
    with row.fault(t("发送成功后确认写回失败一次（套件触发器）", "the confirm write after a successful send fails once (kit trigger)")):
        with trigger("lab16_kit_fail_confirm", body, "fail-confirm", event):
            error = None
            try:
                lab.publisher.publish_one()
            except Exception as exc:  # noqa: BLE001
                error = exc
        row.expect(any(e["id"] == event for e in pending_of(job)), "确认失败后事件应仍未标记 sent",
                   "after the lost confirm the event must still be unsent")
        lab.wait_ended(job, 1)
        first = job_row(job)
        row.note(t(f"publish_one → {type(error).__name__ if error else '无异常'}；第 1 次投递后任务 {first['status']}，"
                   "事件仍 sent_at=NULL", f"publish_one → {type(error).__name__ if error else 'no exception'}; after "
                   f"delivery 1 the job is {first['status']}, the event still sent_at=NULL"))
    row.recover()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the publisher's claim runs out: the event is due again
    lab.drain()
    lab.wait_ended(job, 2)
    after = settle(row, job)
    sent = [e for e in events_of(job) if e["id"] == event]
    again = [d for d in deliveries(job) if d["task_id"] == event]
    row.expect(sent and sent[0]["sent_at"] is not None, "重发后事件应被确认", "after resending the event must be confirmed")
    row.expect(len(again) >= 2, f"同一事件应送达两次，实际 {len(again)} 次", f"the event should arrive twice, got {len(again)}")
    unchanged = first["status"] != "succeeded" or after["result_ref"] == first["result_ref"]
    row.expect(after["attempts"] == 1 and unchanged,
               f"重复投递改变了结果：attempts {after['attempts']}，result_ref 不变={unchanged}",
               f"the duplicate delivery changed the result: attempts {after['attempts']}, result_ref "
               f"unchanged={unchanged}")
    row.note(t(f"同一事件 {short(event)} 送达 {len(again)} 次（message id 相同），attempts 1，只有一个 result_ref",
               f"event {short(event)} delivered {len(again)} times (same message id), attempts 1, one result_ref"))
    row.recovered()


def case_worker_exit(row: Row, lab: Lab) -> None:
    job = row.submit()
    hold(job)
    held = await_hold(row, job)
    running = job_row(job)
    row.expect(running["status"] == "running" and running["attempts"] == 1, "被暂停的执行应处于 running、attempts 1",
               "the held execution should be running with attempts 1")
    token = running["lease_token"]
    pid = int(held["pid"])
    with row.fault(t(f"SIGKILL 持有租约的 worker 子进程 pid {pid}", f"SIGKILL to the pool child holding the lease, pid {pid}")):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 10, f"pid {pid} to die", interval=0.02)
        # task_reject_on_worker_lost sends the message back once the pool notices (a few seconds): that
        # redelivery and the recovery event race for the job later, and claim() lets only one of them in.
        still = job_row(job)
        row.expect(still["status"] == "running" and still["lease_token"] == token,
                   "租约到期前，死掉的执行者仍持有任务（running、同一 token）",
                   "until the lease runs out the dead executor still holds the job (running, same token)")
        row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)  # the lease runs out now
        row.clock_from_here()
        row.observe("running (lease expired)")
    row.recover()
    scan_until(lab, job, ("queued",))
    backoff = seconds_until(job, "next_attempt_at")
    row.note(t(f"recover_batch → queued，next_attempt_at 还有 {backoff:.1f} 秒", f"recover_batch → queued, next_attempt_at "
               f"{backoff:.1f}s ahead"))
    row.advance(job, backoff + 0.001)
    settle(row, job, condition=lambda r: r["attempts"] >= 2 and r["status"] in ("running", "succeeded"))
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 2 and final["lease_token"] != token, "恢复后的领取应为 attempts 2、新 token",
               "the claim after recovery must be attempts 2 with a new token")
    row.extra["budget_seconds"] = LEASE_BUDGET
    row.extra["backoff_seconds"] = round(backoff, 3)


def case_stale_token(row: Row, lab: Lab) -> None:
    job = row.submit()
    old = lab.state_store.claim(job)
    row.expect(old is not None, "新任务应能被领取", "a fresh job must be claimable")
    token_a = str(old["lease_token"])
    # The first executor stalls: its lease runs out and recovery requeues the job (time moved, not waited).
    row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)
    scan_until(lab, job, ("queued",))
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001, setup=True)
    hold(job)
    await_hold(row, job)
    current = job_row(job)
    row.expect(current["status"] == "running" and current["attempts"] == 2 and current["lease_token"] != token_a,
               "worker 应以新 token 领取（attempts 2）", "the worker should hold a new token (attempts 2)")
    target = WORK / "artifacts" / f"{job}.{token_a}.json"
    with row.fault(t("旧 token 的执行者晚到，尝试 finish", "the old token's executor arrives late and calls finish")):
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(old["payload"], ensure_ascii=False), encoding="utf-8")
        late = lab.state_store.finish(job, token_a, str(target))
        now = job_row(job)
        row.note(t(f"finish(旧 token) → {late}；result_ref={now['result_ref']!r}",
                   f"finish(old token) → {late}; result_ref={now['result_ref']!r}"))
        row.expect(late is False, "旧 token 的 finish 必须返回 False", "finish with the old token must return False")
        row.expect(now["result_ref"] is None and now["lease_token"] == current["lease_token"],
                   "旧 token 不能写 result_ref 或夺回租约", "the old token must not write result_ref or take the lease back")
    row.recover()
    release(job)
    final = lab.wait_status(job, "succeeded")
    again = lab.state_store.finish(job, token_a, str(target))
    after = job_row(job)
    row.expect(again is False and after["result_ref"] == final["result_ref"] and final["result_ref"] != str(target),
               "成功后旧 token 仍不能覆盖 result_ref", "after success the old token still cannot overwrite result_ref")
    row.recovered()
    lab.drain()


def case_cancel(row: Row, lab: Lab) -> None:
    job = row.submit()
    hold(job)
    await_hold(row, job)
    with row.fault(t("执行中设置 cancel_requested=TRUE", "cancel_requested=TRUE while the export runs")):
        with kit_db() as cur:
            cur.execute("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                        "WHERE id=%s AND status IN ('queued','running')", (job,))
        release(job)
        lab.wait_ended(job, 1)
        now = job_row(job)
        row.expect(now["status"] != "succeeded" and now["result_ref"] is None,
                   f"取消后仍发布了成功结果（{now['status']}, {now['result_ref']!r}）",
                   f"a success was published after the cancel ({now['status']}, {now['result_ref']!r})")
    row.recover()
    if now["status"] == "running":  # the scanner finishes it once the lease is over (moved, not waited)
        row.advance(job, seconds_until(job, "lease_until") + 0.001)
    final = scan_until(lab, job, ("cancelled",))
    row.expect(final["result_ref"] is None, "cancelled 任务不能有 result_ref", "a cancelled job must have no result_ref")
    row.recovered()
    lab.drain()


def case_exhausted(row: Row, lab: Lab) -> None:
    job = row.submit()
    with row.fault(t("连续 3 次领取都在租约内失联（由套件领取，从不完成）",
                     "three claims in a row, each lost with its lease (kit claims that never finish)")):
        for n in (1, 2, 3):
            got = lab.state_store.claim(job)
            row.expect(got is not None and got["attempts"] == n, f"第 {n} 次领取应成功且 attempts={n}",
                       f"claim {n} should work with attempts={n}")
            row.advance(job, seconds_until(job, "lease_until") + 0.001)
            scan_until(lab, job, ("queued",) if n < 3 else ("failed",))
            if n < 3:
                row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
        letters = dead_letters(job)
        fourth = lab.state_store.claim(job)
        row.note(t(f"3 次过期后 → failed，dead letter {[d['reason'] for d in letters]}；第 4 次 claim → {fourth}",
                   f"after 3 expiries → failed, dead letter {[d['reason'] for d in letters]}; claim 4 → {fourth}"))
        row.expect(len(letters) == 1, "耗尽的任务应有一条 dead letter", "an exhausted job must have one dead letter")
        row.expect(fourth is None, "不能有第 4 次领取", "there must be no fourth claim")
    row.recover()
    lab.drain()  # the recovery events still pending are delivered: nothing may claim
    final = job_row(job)
    row.expect(final["status"] == "failed" and final["attempts"] == 3 and final["result_ref"] is None,
               f"最终应为 failed/3 且无 result_ref，实际 {final['status']}/{final['attempts']}",
               f"the end state must be failed/3 without result_ref, got {final['status']}/{final['attempts']}")
    row.recovered()


def case_result_cache(row: Row, lab: Lab) -> None:
    import redis
    job = row.submit()
    event = pending_of(job)[0]["id"]
    backend = redis.Redis.from_url(setting("CELERY_RESULT_BACKEND"), socket_connect_timeout=2, socket_timeout=3)
    key = f"celery-task-meta-{event}"
    try:
        with row.fault(t(f"执行这个任务的 worker 把 result_expires 缩短为 {RESULT_TTL} 秒",
                         f"the worker running this job keeps results {RESULT_TTL} s (result_expires shortened)")):
            if lab.cache_publisher is not None:
                (lab.cache_folder / "go").write_text("go")
                result_file = lab.cache_folder / "result"
                wait_until(result_file.exists, 30, "the result-cache publisher to publish", interval=0.02)
                outcome = json.loads(result_file.read_text())
                row.expect(outcome.get("published") is True, f"publish_one 失败：{outcome}",
                           f"publish_one failed: {outcome}")
            else:
                lab.pump()
            settle(row, job)
            lab.wait_ended(job, 1)
            asked = [d.get("ignore_result") for d in deliveries(job)]
            if any(asked):  # the message itself said "keep no result": there is nothing to expire
                seen = t("从未保存（消息带 ignore_result=True）", "never stored (the message said ignore_result=True)")
            else:
                cached = None
                with contextlib.suppress(WaitTimeout):
                    cached = wait_until(lambda: backend.get(key), 5, "the Celery result to be stored", interval=0.02)
                wait_until(lambda: not backend.exists(key), RESULT_TTL + 10, "the Celery result to expire",
                           interval=0.05)
                seen = t(f"保存过（{RESULT_TTL} 秒后过期）" if cached else "未观察到",
                         f"stored, expired after {RESULT_TTL} s" if cached else "not seen")
            from celery.result import AsyncResult
            state = AsyncResult(event, app=sys.modules["celery_app"].app).state
            row.note(t(f"Celery 结果：{seen}；现在 AsyncResult.state={state}",
                       f"Celery result: {seen}; now AsyncResult.state={state}"))
            row.observe(f"celery:{state}")
            row.expect(state == "PENDING", f"结果应已过期（PENDING），实际 {state}",
                       f"the result should be gone (PENDING), got {state}")
    finally:
        backend.close()
    row.recover()
    if (WORK / "api_db.py").is_file():
        from fastapi.testclient import TestClient
        api = learner("api_db")
        with TestClient(api.app) as client:
            found = client.get(f"/exports/{job}")
            missing = client.get(f"/exports/{uuid4()}")
        body = found.json() if found.status_code == 200 else {}
        row.note(t(f"GET /exports/{short(job)} → {found.status_code} {body.get('status')}；未知 id → "
                   f"{missing.status_code}",
                   f"GET /exports/{short(job)} → {found.status_code} {body.get('status')}; unknown id → "
                   f"{missing.status_code}"))
        row.expect(found.status_code == 200 and body.get("status") == "succeeded",
                   f"结果缓存过期后查询应为 200 succeeded，实际 {found.status_code}",
                   f"after the cache expired the query must be 200 succeeded, got {found.status_code}")
        row.expect(missing.status_code == 404, "不存在的任务才是 404", "only a job that does not exist is 404")
    else:
        with lab.state_store.transaction() as cur:
            cur.execute("SELECT status FROM export_jobs WHERE id=%s", (job,))
            found = cur.fetchone()
        row.expect(found and found["status"] == "succeeded", "结果缓存过期后 export_jobs 仍应可查",
                   "after the cache expired export_jobs must still answer")
    row.recovered()


def capacity_limit(store) -> int:
    limit = inspect.signature(store.admit_export).parameters.get("limit")
    value = getattr(limit, "default", inspect.Parameter.empty)
    return value if type(value) is int and value > 0 else 100


async def _concurrent_posts(app, n: int, product_ids: list[int]):
    import asyncio

    import httpx2
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://lab16") as client:
        return await asyncio.gather(*(client.post("/exports", json={"product_ids": product_ids}) for _ in range(n)))


def submit_app():
    """The learner's HTTP submit: api_db's POST /exports when the folder has one, else accept_export
    behind a minimal route (the curriculum's adapter), answering 202 like the lesson's API."""
    if (WORK / "api_db.py").is_file():
        api = learner("api_db")
        if any(getattr(r, "path", None) == "/exports" and "POST" in getattr(r, "methods", ()) for r in api.app.routes):
            return api.app, "api_db POST /exports"
    from fastapi import Body, FastAPI
    adapter = learner("admission_adapter")
    app = FastAPI()

    @app.post("/exports", status_code=202)
    def submit(product_ids: list[int] = Body(..., embed=True)):  # noqa: B008 - FastAPI's own idiom
        return adapter.accept_export(product_ids)
    return app, "admission_adapter.accept_export"


def case_queue_full(row: Row, lab: Lab) -> None:
    import asyncio
    api, route = submit_app()
    limit = capacity_limit(lab.state_store)
    fillers: list[str] = []
    try:
        with row.fault(t(f"容量门闩几乎占满（上限 {limit}，只剩 2 个空位）后 6 个并发 HTTP 提交",
                         f"the gate nearly full (limit {limit}, 2 places left), then 6 concurrent HTTP submits")):
            room = limit - active_jobs() - 2
            row.expect(room >= 0, f"已有 {active_jobs()} 个活动任务，超过上限 {limit}",
                       f"{active_jobs()} active jobs already exceed the limit {limit}")
            fillers = [str(uuid4()) for _ in range(room)]
            with kit_db() as cur:
                cur.executemany("INSERT INTO export_jobs (id, payload, next_attempt_at, deadline_at) VALUES "
                                "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 1 DAY), DATE_ADD(NOW(6), INTERVAL 1 DAY))",
                                [(f,) for f in fillers])
            before = counts()
            answers = asyncio.run(_concurrent_posts(api, 6, row.products()))
            codes = sorted(a.status_code for a in answers)
            accepted = [a.json()["job_id"] for a in answers if a.status_code == 202]
            refused = [a for a in answers if a.status_code == 503]
            row.note(t(f"{route}：6 个并发提交 → {codes}；活动任务 {active_jobs()}/{limit}",
                       f"{route}: 6 concurrent submits → {codes}; active jobs {active_jobs()}/{limit}"))
            row.expect(len(accepted) == 2 and len(refused) == 4, f"应恰好 2 个 202、4 个 503，实际 {codes}",
                       f"expected exactly two 202 and four 503, got {codes}")
            row.expect(all(r.headers.get("retry-after") for r in refused), "503 应带 Retry-After",
                       "a 503 must carry Retry-After")
            row.expect(counts() == (before[0] + 2, before[1] + 2) and active_jobs() == limit,
                       "只有被受理的 2 个请求留下任务与事件", "only the two accepted requests left a job and an event")
            for job in accepted:
                row.job(job)
                row.expect(len(events_of(job)) == 1, "每个 202 都对应一条任务和一个事件", "every 202 has its job and event")
    finally:
        if fillers:
            with kit_db() as cur:
                marks = ",".join(["%s"] * len(fillers))
                cur.execute(f"DELETE FROM export_jobs WHERE id IN ({marks})", fillers)
    row.recover()
    for job in row.jobs:
        settle(row, job)
    row.recovered()


def case_same_slot(row: Row, lab: Lab) -> None:
    schedule = learner("schedule_store")
    slot = f"lab16:{uuid4()}:same-slot"
    results: list = [None] * 4
    errors: list[str] = []
    gate = threading.Barrier(4)

    def call(i: int) -> None:
        try:
            gate.wait(10)
            results[i] = schedule.schedule_once(slot, row.products())
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {redact(str(exc))[:160]}")

    with row.fault(t("4 个线程同时对同一个新 slot 调用 schedule_once", "four threads call schedule_once for one new slot at once")):
        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        made = [r for r in results if r]
        row.note(t(f"schedule_once × 4 → {[short(r) if r else None for r in results]}",
                   f"schedule_once × 4 → {[short(r) if r else None for r in results]}"))
        row.expect(not errors, f"调用出错：{errors[:1]}", f"a call failed: {errors[:1]}")
        row.expect(len(made) == 1, f"同一 slot 应只创建 1 个任务，实际 {len(made)}",
                   f"one slot must create one job, got {len(made)}")
        job = row.job(made[0])
        slots = sql("SELECT job_id FROM export_schedule_slots WHERE slot_key=%s", (slot,))
        row.expect(len(slots) == 1 and slots[0]["job_id"] == job and len(events_of(job)) == 1,
                   "应有 1 个槽、1 个任务、1 个事件", "there must be one slot, one job and one event")
    row.recover()
    settle(row, job)
    row.recovered()


def case_cross_minute(row: Row, lab: Lab) -> None:
    schedule = learner("schedule_store")
    tasks = learner("schedule_tasks")
    prefix = f"lab16:{uuid4()}:"
    t1 = datetime(2026, 1, 1, 10, 0, 59, tzinfo=UTC)
    t2 = datetime(2026, 1, 1, 10, 1, 1, tzinfo=UTC)
    with row.fault(t("同一个模拟信号在 10:00:59 与 10:01:01 两个执行分钟各处理一次",
                     "the same simulated signal handled in two execution minutes, 10:00:59 and 10:01:01")):
        slot1, slot2 = prefix + tasks.execution_slot(t1), prefix + tasks.execution_slot(t2)
        first = schedule.schedule_once(slot1, row.products())
        again = schedule.schedule_once(slot1, row.products())
        later = schedule.schedule_once(slot2, row.products())
        row.note(t(f"{slot1[len(prefix):]} → {first and short(first)}；同槽再次 → {again}；{slot2[len(prefix):]} → "
                   f"{later and short(later)}", f"{slot1[len(prefix):]} → {first and short(first)}; same slot again → "
                   f"{again}; {slot2[len(prefix):]} → {later and short(later)}"))
        row.expect(first and again is None, "同一槽第二次应返回 None", "the same slot must return None the second time")
        row.expect(later and later != first and slot1 != slot2,
                   "下一分钟的同一信号应落入新槽并新建任务（当前模型的边界）",
                   "the same signal a minute later must land in a new slot with a new job (this model's boundary)")
        row.job(first)
        row.job(later)
        slots = sql("SELECT slot_key FROM export_schedule_slots WHERE slot_key LIKE %s", (prefix + "%",))
        row.expect(len(slots) == 2, "应有两个槽", "there must be two slots")
    row.recover()
    for job in row.jobs:
        settle(row, job)
    row.recovered()
    row.extra["boundary"] = "two slots, two jobs: execution-minute merging, not exactly-once per signal"


def case_sent_unclaimed(row: Row, lab: Lab) -> None:
    job = row.submit()
    with row.fault(t("publisher 已确认发送，但消息丢失（标记 sent，不真正发送）",
                     "the publisher confirmed the send but the message is lost (marked sent, never sent)")):
        with kit_db() as cur:
            cur.execute("UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE job_id=%s AND sent_at IS NULL",
                        (job,))
            cur.execute("UPDATE export_jobs SET last_dispatched_at=NOW(6) WHERE id=%s", (job,))
        row.observe("queued+sent (message lost)")
    row.recover()
    age = age_until_requeued(row, job)
    queued = job_row(job)
    for _ in range(2):
        lab.scan()
    pending = pending_of(job)
    row.note(t(f"派发 {age:.0f} 秒后扫描生成新事件；再扫 2 次仍是 {len(pending)} 条待发；attempts {queued['attempts']}",
               f"{age:.0f}s after the dispatch the scan made a new event; 2 more scans: still {len(pending)} pending; "
               f"attempts {queued['attempts']}"))
    row.expect(queued["status"] == "queued" and queued["attempts"] == 0, "重新派发不能增加 attempts",
               "re-dispatching must not raise attempts")
    row.expect(len(pending) == 1, "已有待发事件时扫描不能继续新增", "scans must not add events while one is pending")
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "只有真正的领取让 attempts 变为 1", "only the real claim makes attempts 1")
    row.extra["budget_seconds"] = QUEUED_BUDGET
    row.extra["unclaimed_age_seconds"] = round(age, 3)


def case_fail_before_claim(row: Row, lab: Lab) -> None:
    job = row.submit()
    fail_claim(job)
    with row.fault(t("worker 在 claim 之前连接数据库失败（一次）", "the worker's database connection fails before claim (once)")):
        lab.pump()
        lab.wait_ended(job, 1)
        now = job_row(job)
        state = ended(job)[0].get("state")
        row.note(t(f"投递结束于 {state}；任务 {now['status']}，attempts {now['attempts']}，待发事件 {len(pending_of(job))}",
                   f"the delivery ended {state}; job {now['status']}, attempts {now['attempts']}, pending events "
                   f"{len(pending_of(job))}"))
        row.expect(now["status"] == "queued" and now["attempts"] == 0, "claim 前失败应保持 queued、attempts 0",
                   "a failure before claim leaves the job queued with attempts 0")
    row.recover()
    age_until_requeued(row, job)
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "恢复后的第一次真正领取 attempts 为 1", "the first real claim after recovery has attempts 1")
    row.extra["budget_seconds"] = QUEUED_BUDGET


def case_backoff_duplicates(row: Row, lab: Lab) -> None:
    job = row.submit()
    with kit_db() as cur:  # a durable backoff, as a failed attempt would leave it
        cur.execute("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 10 SECOND) WHERE id=%s", (job,))
    queue = sql("SELECT queue_name FROM export_outbox WHERE job_id=%s LIMIT 1", (job,))
    queue = (queue and queue[0].get("queue_name")) or QUEUES[1]
    app = sys.modules["celery_app"].app
    with row.fault(t("退避期内（next_attempt_at 在 10 秒后）送来 2 条重复消息，并直接 claim 两次",
                     "two duplicate messages and two direct claims while next_attempt_at is 10 s ahead")):
        for _ in range(2):
            app.send_task("products.export", args=[job], queue=queue, retry=False)
        lab.wait_ended(job, 2)
        direct = [lab.state_store.claim(job), lab.state_store.claim(job)]
        now = job_row(job)
        answers = [e["retval"].get("claimed") if isinstance(e.get("retval"), dict) else e.get("retval")
                   for e in ended(job)]
        row.note(t(f"2 条重复消息 → claimed={answers}；直接 claim → {direct}；attempts {now['attempts']}",
                   f"2 duplicate messages → claimed={answers}; direct claims → {direct}; attempts {now['attempts']}"))
        row.expect(direct == [None, None] and now["attempts"] == 0 and now["status"] == "queued",
                   "退避期内的重复消息与 claim 都不能领取或增加 attempts",
                   "duplicates and claims during the backoff must neither claim nor raise attempts")
    row.recover()
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "退避结束后的第一次领取 attempts 为 1", "the first claim after the backoff has attempts 1")
    row.recovered()


def case_pending_rescan(row: Row, lab: Lab) -> None:
    job = row.submit()
    with row.fault(t("publisher 停着：queued 任务的唯一待发事件已过 65 秒，扫描器连跑 3 次",
                     "the publisher is down: the queued job's only pending event is 65 s old; the scanner runs 3 "
                     "times")):
        row.advance(job, 65)
        for _ in range(3):
            lab.scan()
        events = events_of(job)
        now = job_row(job)
        row.note(t(f"3 次扫描后事件数 {len(events)}（待发 {len(pending_of(job))}），attempts {now['attempts']}",
                   f"after 3 scans: {len(events)} events ({len(pending_of(job))} pending), attempts {now['attempts']}"))
        row.expect(len(events) == 1 and events[0]["sent_at"] is None,
                   "已有待发事件时扫描器不能新增恢复事件", "the scanner must not add a recovery event while one is pending")
        row.expect(now["status"] == "queued" and now["attempts"] == 0, "任务应保持 queued、attempts 0",
                   "the job must stay queued with attempts 0")
    row.recover()
    settle(row, job)
    row.recovered()


# ================================================================ the catalogue and the runner

class Case:
    def __init__(self, case_id: str, point: tuple[str, str], operation: tuple[str, str], expect: tuple[str, str], run):
        self.id, self.point, self.operation, self.expect, self.run = case_id, point, operation, expect, run


CASES = [
    Case("commit_fault_rollback", ("DB事务提交前", "before the DB commit"),
         ("本次提交主动抛异常", "this submit raises before commit"), ("job与outbox同时回滚", "job and outbox roll back together"),
         case_commit_fault),
    Case("broker_unavailable", ("broker不可用", "broker unavailable"), ("停止私有Redis后提交",
                                                                     "submit with the private Redis stopped"),
         ("job与outbox保留，sent_at为空", "job and outbox kept, sent_at NULL"), case_broker_down),
    Case("publish_after_send_before_mark", ("发布后未标sent", "published, not marked sent"),
         ("跳过一次确认写回", "lose one confirm write"),
         ("可重复发布，业务结果仍受CAS保护", "published again; the result stays CAS-protected"), case_publish_before_mark),
    Case("worker_exit_with_lease", ("worker持租约退出", "worker exits holding the lease"),
         ("SIGKILL本次执行进程", "SIGKILL this job's pool process"), ("到期恢复，attempts增加",
                                                                "recovered after expiry, attempts up"),
         case_worker_exit),
    Case("stale_token_late_finish", ("旧token晚到", "old token arrives late"), ("新领取后用旧token完成",
                                                                             "finish with the old token after a new "
                                                                             "claim"),
         ("finish=False，不改result_ref", "finish=False, result_ref untouched"), case_stale_token),
    Case("cancel_requested", ("取消", "cancel"), ("执行中设置cancel_requested", "set cancel_requested mid-run"),
         ("最终cancelled，不发布成功结果", "ends cancelled, no success published"), case_cancel),
    Case("attempts_exhausted", ("次数耗尽", "attempts exhausted"), ("3次领取均过期", "three claims all expire"),
         ("failed及dead letter，无第4次领取", "failed with a dead letter, no fourth claim"), case_exhausted),
    Case("result_cache_expired", ("结果缓存过期", "result cache expired"), ("缩短本地result_expires", "shorten result_expires"),
         ("MySQL状态仍可查询", "the MySQL state still answers"), case_result_cache),
    Case("queue_full", ("队列满", "queue full"), ("小余量下并发提交", "concurrent submits with little room left"),
         ("503，无虚假202", "503, no false 202"), case_queue_full),
    Case("same_slot_concurrent", ("同槽周期重复", "same slot twice"), ("相同slot并发调度", "same slot scheduled concurrently"),
         ("只创建一个周期job", "one scheduled job only"), case_same_slot),
    Case("cross_minute_redelivery", ("周期跨分钟重投", "schedule redelivered across minutes"),
         ("同一模拟信号用两个执行分钟", "one simulated signal, two execution minutes"),
         ("当前模型创建两个槽", "this model creates two slots"), case_cross_minute),
    Case("sent_not_claimed", ("已派发但未领取", "sent but never claimed"), ("标记sent且不发送，时间超过阈值",
                                                                     "marked sent, never sent, past the threshold"),
         ("扫描生成新outbox，恢复后完成", "the scan adds an event; the job completes"), case_sent_unclaimed),
    Case("fail_before_claim", ("claim之前失败", "failure before claim"), ("worker进入claim前连接失败",
                                                                      "the worker's DB connection fails before claim"),
         ("queued路径能重新派发", "the queued path dispatches again"), case_fail_before_claim),
    Case("duplicate_during_backoff", ("退避期间重复消息", "duplicates during backoff"),
         ("next_attempt_at未来时重复消息与claim", "duplicates and claims while next_attempt_at is ahead"),
         ("均返回None，attempts不增加", "all None, attempts unchanged"), case_backoff_duplicates),
    Case("pending_event_rescan", ("pending事件仍在", "pending event still there"), ("同一个queued重复运行扫描器",
                                                                                "scan one queued job repeatedly"),
         ("不为已有pending事件继续新增恢复事件", "no extra recovery event while one is pending"), case_pending_rescan),
]
CASE_IDS = [c.id for c in CASES]


def empty_row(case: Case) -> dict:
    return {"case": case.id, "fault_point": t(*case.point), "operation": t(*case.operation), "expect": t(*case.expect),
            "job_id": None, "operated_at": None, "observed_states": [], "message_ids": [], "deliveries": None,
            "duplicate_deliveries": None, "attempts": None, "recovery_seconds": None, "artifact_sha256": None,
            "result": "not_run", "notes": []}


def baseline(lab: Lab, row: Row) -> None:
    """Before a row: no kit fault left in place, broker answering, worker alive and idle, nothing due."""
    drop_kit_triggers()
    for path in (HOLD_LIST, FAIL_LIST):
        path.unlink(missing_ok=True)
    if lab.private and not lab.broker_ping():
        lab.broker_start()
    assert lab.worker is not None and lab.worker.alive(), t("matrix 的 worker 已退出，见 lab16-worker.log",
                                                            "the matrix worker has exited; see lab16-worker.log")
    lab.drain()
    row.known = {r["id"] for r in sql("SELECT id FROM export_jobs")}
    row.baseline = {"broker": "PONG" if (not lab.private or lab.broker_ping()) else "down",
                    "due_events": due_events(), "active_jobs": active_jobs(), "worker_pid": lab.worker.pid}
    row.phases["baseline"] = now_iso()


def restore(lab: Lab, row: Row, failed: bool) -> None:
    """After a row, whatever happened: faults removed, held jobs released, a failed row's jobs parked."""
    with contextlib.suppress(Exception):
        drop_kit_triggers()
    for job in row.jobs:
        with contextlib.suppress(OSError):
            release(job)
    for path in (HOLD_LIST, FAIL_LIST):
        path.unlink(missing_ok=True)
    if lab.private and not lab.broker_ping():
        with contextlib.suppress(Exception):
            lab.broker_start()
    if failed:
        with contextlib.suppress(Exception):
            park(row.jobs)


def run_case(case: Case, lab: Lab) -> dict:
    started = time.monotonic()
    row = Row(case, lab)
    out = empty_row(case)
    failed = True
    try:
        baseline(lab, row)
        case.run(row, lab)
        assert len(row.faults) == 1, t("这一行没有注入故障", "this row injected no fault")
        assert row.recovery_seconds is not None, t("这一行没有记录恢复", "this row recorded no recovery")
        failed = False
    except AssertionError as exc:
        out["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a row that raised is a failed row, with why
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-2:]
        out["error"] = redact(f"{type(exc).__name__}: {exc} | {''.join(tail).strip()[-300:]}")
    finally:
        restore(lab, row, failed)
    main = row.jobs[0] if row.jobs else None
    final = job_row(main) if main else None
    deliveries_seen = deliveries(main) if main else []
    out.update({
        "job_id": main, "job_ids": row.jobs, "operated_at": row.operated_at, "phases": row.phases,
        "fault": row.faults[0] if row.faults else None, "faults_injected": len(row.faults),
        "baseline": row.baseline, "observed_states": row.observed_states(),
        "message_ids": sorted({d["task_id"] for d in deliveries_seen}), "deliveries": len(deliveries_seen),
        "attempts": final and final["attempts"], "final_status": final and final["status"],
        "result_ref": final and final["result_ref"],
        "recovery_seconds": row.recovery_seconds, "measured_seconds": row.measured_seconds,
        "time_moved_seconds": round(row.skipped, 3), "setup_time_moved_seconds": round(row.setup_moved, 3),
        "notes": row.notes, **row.extra,
    })
    if final is not None:
        out["duplicate_deliveries"] = max(0, len(deliveries_seen) - int(final["attempts"]))
        if final["status"] == "succeeded":
            try:
                out["artifact_sha256"], out["artifact"] = artifact_evidence(final)
            except AssertionError as exc:
                failed = True
                out["error"] = str(exc)
    if "budget_seconds" in out and out.get("recovery_seconds") is not None:
        out["within_budget"] = out["recovery_seconds"] <= out["budget_seconds"]
    if lab.watcher.error:
        out["notes"].append(f"state watcher: {lab.watcher.error}")
    out["result"] = "fail" if failed else "pass"
    out["row_seconds"] = round(time.monotonic() - started, 3)
    return out


def build_record(rows: dict[str, dict], lab: Lab | None) -> dict:
    cases = [rows.get(case.id) or empty_row(case) for case in CASES]
    return {
        "record": "lesson 16 failure matrix",
        "generated_by": "verifiers/failure_matrix.py",
        "generated_at": now_iso(),
        "broker": (f"private redis-server 127.0.0.1:{lab.port}" if lab and lab.private
                   else "the slot's broker database"),
        "scan_period_seconds": SCAN_PERIOD,
        "budgets_seconds": {"expired_lease": LEASE_BUDGET, "sent_not_claimed": QUEUED_BUDGET},
        "fields": {
            "observed_states": "statuses polled from export_jobs every 20 ms, plus what the kit saw (absent, "
                               "celery:PENDING …), in time order",
            "deliveries": "task starts the worker really ran for the job; duplicate_deliveries = deliveries - attempts",
            "recovery_seconds": "from the injection (worker_exit_with_lease: from the lease expiry) to the row's "
                                "recovered condition = measured_seconds + time_moved_seconds",
            "time_moved_seconds": "durable time moved into the past instead of waited for (leases, backoffs, "
                                  "dispatch ages, publisher claims)",
            "setup_time_moved_seconds": "time moved to set the scene before the fault; not part of recovery",
        },
        "summary": {r: sum(1 for c in cases if c["result"] == r) for r in RESULTS},
        "cases": cases,
    }


def write_record(record: dict, path: Path = RECORD) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, ensure_ascii=False, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def run_matrix(case_ids=None, lab: Lab | None = None) -> dict:
    """Run the named rows (default: all 15) in catalogue order and write the record."""
    chosen = [c for c in CASES if case_ids is None or c.id in case_ids]
    own = lab is None
    if own:
        lab = Lab(cache_worker=any(c.id == "result_cache_expired" for c in chosen))
        lab.start()
    rows = {}
    try:
        for case in chosen:
            rows[case.id] = run_case(case, lab)
    finally:
        if own:
            lab.stop()
    record = build_record(rows, lab)
    write_record(record)
    return record


if __name__ == "__main__":
    wanted = sys.argv[1:] or None
    unknown = sorted(set(wanted or []) - set(CASE_IDS))
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASE_IDS)}")
    result = run_matrix(wanted)
    for row in result["cases"]:
        print(f"{row['result']:8} {row['case']:32} job {row['job_id'] and short(row['job_id'])} "
              f"recovery {row['recovery_seconds']}s {row.get('error', '')[:120]}")
    print("record:", RECORD)
