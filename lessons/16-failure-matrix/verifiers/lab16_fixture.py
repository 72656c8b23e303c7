"""Lesson 16's failure-matrix stack (kit module, not a lesson file): the processes and servers a drill runs
against (Stack: a private broker, the matrix's worker(s), the result-cache row's publisher), and the kit's view
of what happened — the database (a job's committed state changes come from a kit trigger, in commit order) and
lab16_worker's start/end events per delivery.  The learner's code runs in the judge's probe (lab16_learner.py),
never in this process.  Durable times that can be set are moved into the past (advance), never waited out.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from lab16_publishing import CACHE_PUBLISHER, publishing

from shared import handshake
from shared.lesson_celery import READY_MARK, redis_client
from shared.logs import LOG_DIR
from shared.events import job_runs, read_events, short, task_runs
from shared.proc import pid_running
from shared.settings import WORK, redact, setting
from shared.hold_gate import HoldList
from shared.i18n import t
from shared import lesson_db
from shared.lesson_db import close_kit_connection, fault_trigger, make_marks_table, payload_of, sql, trigger
from shared.lesson_db import outbox_of as events_of  # the job's outbox events, oldest first
from shared.probe import LearnerRaised, Probe
from shared.proc import Process, WaitTimeout, free_port, port_open, wait_all_ready, wait_until

GATE = HoldList(LOG_DIR, "lab16")  # lab16_worker's gate on the first file write, and its events
FAIL_LIST = LOG_DIR / "lab16-fail-claim.txt"
MARKS = "lab16_kit_marks"
TRANSITIONS = "lab16_kit_transitions"
QUEUES = ("exports.fast", "exports.bulk")
RESULT_TTL = 2        # result_expires of the result-cache row's worker, in seconds
START_LIMIT = 120.0   # a worker or helper process that is not ready by then has failed to start (generous)


# ---------------------------------------------------------------- the learner's modules (in the probe)

PROBE = Probe(verifiers=Path(__file__).resolve().parent)  # the learner's modules load there, never here
CALL_LIMIT = 120.0  # one call of a learner function (a claim behind a lock wait takes its time)


def learner(module: str):
    """One of the learner's modules, imported in the probe now (an import error is the learner's to see):
    module.name(...) runs there."""
    return PROBE.module(module, timeout=CALL_LIMIT)


def ask(function: str, *args, timeout: float = CALL_LIMIT):
    """A kit function of lab16_learner.py, run in the probe next to the learner's code: plain data back."""
    return PROBE.call(f"lab16_learner:{function}", *args, timeout=timeout)


@functools.cache
def _read_max_attempts():
    return PROBE.get("state_store:MAX_ATTEMPTS", CALL_LIMIT).get("value", 3)


def max_attempts():
    """The learner's state_store.MAX_ATTEMPTS (3 when it has none), read once from the probe (a failed read is
    not kept: the next call asks again)."""
    try:
        return _read_max_attempts()
    except LearnerRaised:
        return 3


# ================================================================ the database, as the kit reads it

def pending_of(job_id: str) -> list[dict]:
    return events_of(job_id, unsent_only=True)


def due_events() -> int:
    return int(sql("SELECT COUNT(*) AS n FROM export_outbox WHERE sent_at IS NULL AND available_at<=NOW(6) "
                   "AND (claim_until IS NULL OR claim_until<NOW(6))")[0]["n"])


def seconds_until(job_id: str, column: str) -> float:
    """How far in the future export_jobs.<column> of this job is (0 when past or NULL)."""
    return max(0.0, lesson_db.seconds_until(job_id, column) or 0.0)


def claim_seconds_left(job_id: str) -> float:
    """How long the publisher's claim on the job's unsent event still runs (0 when none is live)."""
    rows = sql("SELECT MAX(TIMESTAMPDIFF(MICROSECOND, NOW(6), claim_until)) AS us FROM export_outbox "
               "WHERE job_id=%s AND sent_at IS NULL", (job_id,))
    return max(0.0, (rows[0]["us"] or 0) / 1e6)


def artifact_evidence(job: dict) -> tuple[str, str]:
    """(sha256, path) of a succeeded job's file, after the kit's own checks: inside artifacts/, JSON == payload."""
    ref = job.get("result_ref")
    assert ref, t("job {id} succeeded without result_ref", id=short(job['id']))
    root = (WORK / "artifacts").resolve()
    path = Path(ref)
    target = (path if path.is_absolute() else WORK / path).resolve()
    assert target.is_relative_to(root), t("the artifact is outside artifacts: {ref}", ref=ref)
    assert target.is_file(), t("result_ref points at no file: {ref}", ref=ref)
    data = target.read_bytes()
    try:
        content = json.loads(data)
    except ValueError:
        raise AssertionError(t("the artifact is not JSON: {ref}", ref=ref)) from None
    assert content == payload_of(job), t("the artifact's content differs from the payload: {ref}", ref=ref)
    return hashlib.sha256(data).hexdigest(), str(target.relative_to(WORK))


def advance(job_ids, seconds: float) -> float:
    """Let `seconds` pass for these jobs only (instead of waiting): every durable time of the job and its
    events moves back.  The caller adds the seconds to its measured time, as a real clock would show."""
    if isinstance(job_ids, str):
        job_ids = [job_ids]
    us = int(round(seconds * 1e6))
    if us <= 0:
        return 0.0
    lesson_db.move_back("export_jobs", "id", job_ids, us / 1e6, "created_at", "updated_at", "next_attempt_at",
                        "lease_until", "last_dispatched_at", "deadline_at")
    lesson_db.move_back("export_outbox", "job_id", job_ids, us / 1e6, "created_at", "available_at", "sent_at",
                        "claim_until")
    return us / 1e6


def park(job_ids) -> None:
    """Take leftover jobs out of every later path (a failed row's or a check's own): failed, nothing due."""
    lesson_db.close_open_jobs(job_ids, "status='failed', error_code='lab16_parked', lease_token=NULL, "
                              "lease_until=NULL, result_ref=NULL")


# ---------------------------------------------------------------- the job's committed state changes

def install_transitions(triggers: contextlib.ExitStack) -> None:
    """Triggers that write every committed change of a job's status, attempts or lease_token, in the
    changing transaction itself: a rolled-back change leaves no line, and the row lock orders the lines
    of one job as the changes were made (seq).  They stay until `triggers` closes."""
    sql(f"CREATE TABLE IF NOT EXISTS {TRANSITIONS} (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "job_id CHAR(36) CHARACTER SET ascii NOT NULL, status VARCHAR(16) NOT NULL, attempts INT NOT NULL, "
        "lease_token CHAR(36) CHARACTER SET ascii NULL, KEY lab16_transitions_job (job_id, seq)) ENGINE=InnoDB")
    make_marks_table(MARKS)  # a kit trigger's end clears the kit's marks
    remember = (f"INSERT INTO {TRANSITIONS} (job_id, status, attempts, lease_token) "
                "VALUES (NEW.id, NEW.status, NEW.attempts, NEW.lease_token)")
    triggers.enter_context(trigger("lab16_kit_job_created", f"CREATE TRIGGER lab16_kit_job_created AFTER INSERT "
                                   f"ON export_jobs FOR EACH ROW {remember}", MARKS))
    triggers.enter_context(trigger("lab16_kit_job_changed", f"""
        CREATE TRIGGER lab16_kit_job_changed AFTER UPDATE ON export_jobs FOR EACH ROW
        BEGIN
          IF NOT (NEW.status <=> OLD.status) OR NOT (NEW.attempts <=> OLD.attempts)
             OR NOT (NEW.lease_token <=> OLD.lease_token) THEN
            {remember};
          END IF;
        END""", MARKS))


def transitions_of(job_id: str) -> list[dict]:
    return sql(f"SELECT seq, status, attempts, lease_token FROM {TRANSITIONS} WHERE job_id=%s ORDER BY seq",
               (job_id,))


def last_seq(job_id: str | None) -> int:
    """The newest committed change of the job so far (0: none, or no job yet)."""
    if not job_id:
        return 0
    rows = sql(f"SELECT MAX(seq) AS seq FROM {TRANSITIONS} WHERE job_id=%s", (job_id,))
    return int(rows[0]["seq"] or 0)


# ---------------------------------------------------------------- kit triggers: faults in the database

FAIL_OUTBOX = "lab16_kit_fail_outbox"
FAIL_CONFIRM = "lab16_kit_fail_confirm"


def outbox_insert_fails():
    """Every export_outbox INSERT fails before the commit, while the block runs."""
    return fault_trigger(FAIL_OUTBOX, "BEFORE INSERT", "export_outbox", MARKS, "fail-outbox", "all",
                         "lab16 drill: the outbox insert fails before commit")


def confirm_lost(event_id: str):
    """The publisher's confirm of this one event (sent_at set) fails, while the block runs."""
    return fault_trigger(FAIL_CONFIRM, "BEFORE UPDATE", "export_outbox", MARKS, "fail-confirm", event_id,
                         "lab16 drill: the confirm write is lost", "NEW.sent_at IS NOT NULL AND OLD.sent_at IS NULL",
                         "OLD.id")


def drop_kit_triggers() -> None:
    """No fault trigger left in place (the transition triggers stay: they observe, they inject nothing)."""
    for name in (FAIL_OUTBOX, FAIL_CONFIRM):
        sql(f"DROP TRIGGER IF EXISTS {name}")
    make_marks_table(MARKS)


# ================================================================ the worker, as lab16_worker saw it

def delivery_log(job_id: str) -> list[dict]:
    """Each delivery of the job the worker started: {task_id, pid, start, end (None while running or
    killed)} (shared.events.job_runs pairs them)."""
    return [{"task_id": start.get("task_id"), "pid": start.get("pid"), "start": start, "end": end}
            for start, end in job_runs(GATE.events, job_id, task="products.export")]


def deliveries(job_id: str) -> list[dict]:
    return [d["start"] for d in delivery_log(job_id)]


def ended(job_id: str) -> list[dict]:
    return [d["end"] for d in delivery_log(job_id) if d["end"] is not None]


def outcome(end: dict) -> str:
    """How a delivery ended, from the probe's record of its end: claimed / not_claimed / database_error /
    raised / other."""
    if end.get("error_type"):
        return "database_error" if end.get("database_error") else "raised"
    retval = end.get("retval")
    if isinstance(retval, dict) and isinstance(retval.get("claimed"), bool):
        return "claimed" if retval["claimed"] else "not_claimed"
    return "other"


def describe_end(end: dict) -> str:
    if end.get("error_type"):
        return redact(f"{end['error_type']} {end.get('error') or ''}")[:160]
    return redact(f"{end.get('state')} {json.dumps(end.get('retval'), default=str)}")[:160]


def open_deliveries() -> list[dict]:
    """Task starts with no end whose process still lives (a killed child's start stays open forever)."""
    return [start for start, end in task_runs(read_events(GATE.events)) if end is None and pid_running(start["pid"])]


def fail_claim(job_id: str) -> None:
    """The worker's first claim of this job raises a database error before it reaches the database."""
    with open(FAIL_LIST, "a", encoding="utf-8") as handle:
        handle.write(job_id + "\n")


# ================================================================ the stack: broker, workers, learner code

class Stack:
    """The servers and workers the matrix's drills run against: one private broker, the matrix's worker(s),
    the learner's modules (in the probe: stack.state_store, stack.publisher, stack.recovery).

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
        self.private = False
        self.worker: Process | None = None
        self.cache_worker: Process | None = None
        self.cache_publisher: Process | None = None
        self.cache_folder = LOG_DIR / "lab16-cache-publisher"
        self.setup_seconds = 0.0
        self._redis_client = None
        self.triggers = contextlib.ExitStack()  # the transition triggers, dropped at stop

    # ------------------------------------------------------------ start and stop

    def start(self) -> None:
        started = time.monotonic()
        for path in (GATE.events, GATE.path, FAIL_LIST):
            path.unlink(missing_ok=True)
        for pattern in ("lab16-held-*", "lab16-failed-*", "lab16-release-*"):  # the probe's once-only markers
            for path in LOG_DIR.glob(pattern):
                path.unlink(missing_ok=True)
        # LAB_TEST_SLOT_BROKER=1 forces the fallback (the slot's own broker database), as with docker services.
        from shared.services_native import find_binary
        binary = None if os.environ.get("LAB_TEST_SLOT_BROKER") == "1" else find_binary("redis-server")
        if binary:
            self.private = True
            self.port = free_port()
            folder = LOG_DIR / "lab16-broker"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            self.redis_argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "yes", "--appendfsync", "always", "--dir", str(folder)]
            self.broker_url = f"redis://127.0.0.1:{self.port}/0"
            self.broker_start()
        else:  # docker/external services with no redis-server here: the slot's own broker database
            self.broker_url = setting("CELERY_BROKER_URL") or ""
        assert self.broker_url, t("CELERY_BROKER_URL is missing")
        install_transitions(self.triggers)
        # The learner's celery_app reads the environment first (load_dotenv never overrides it).
        os.environ["CELERY_BROKER_URL"] = self.broker_url
        env = dict(os.environ)
        node = f"lab16-{os.getpid()}"
        argv = [sys.executable, "-m", "celery", "-A", "lab16_worker:app", "worker", "-l", "INFO",
                "-Q", ",".join(QUEUES), "--without-mingle", "--without-gossip", "--without-heartbeat"]
        if not self.private:  # no second broker database: this worker keeps results briefly itself
            env["TASKLAB_RESULT_EXPIRES"] = str(RESULT_TTL)
        self.worker = Process([*argv, "--concurrency=2", "-n", f"{node}-main@%h"], cwd=WORK,
                              log_path=LOG_DIR / "lab16-worker.log", env=env)
        if self.cache_worker_wanted and self.private:
            cache_env = dict(env, CELERY_BROKER_URL=f"redis://127.0.0.1:{self.port}/1",
                             TASKLAB_RESULT_EXPIRES=str(RESULT_TTL))
            self.cache_worker = Process([*argv, "--pool=solo", "-n", f"{node}-cache@%h"], cwd=WORK,
                                        log_path=LOG_DIR / "lab16-cache-worker.log", env=cache_env)
            shutil.rmtree(self.cache_folder, ignore_errors=True)
            self.cache_folder.mkdir(parents=True)
            helper = Path(__file__).with_name("lab16_cache_publisher.py")
            pub_env = dict(cache_env)
            pub_env.pop("TASKLAB_RESULT_EXPIRES", None)
            # `python publisher.py` sees the folder first: so does this helper (it is the learner's process).
            pub_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(WORK), pub_env.get("PYTHONPATH")) if p)
            self.cache_publisher = Process([sys.executable, str(helper), str(self.cache_folder)], cwd=WORK,
                                           log_path=self.cache_folder / "publisher.log", env=pub_env)
        wait_all_ready((self.worker, self.cache_worker), START_LIMIT, grace=10, log_contains=READY_MARK)
        if self.cache_publisher is not None:
            ready = self.cache_folder / f"ready-{CACHE_PUBLISHER}"
            wait_until(lambda: ready.exists() or not self.cache_publisher.alive(), START_LIMIT,
                       t("the result-cache row's publisher to start"), interval=0.05)
            assert ready.exists(), t("the result-cache row's publisher did not start: ") + \
                redact(self.cache_publisher.log_tail(5))
        # The probe (started now, or earlier by a check) sends to this broker, celery_app loaded or not.
        ask("point_broker", self.broker_url)
        self.state_store = learner("state_store")
        self.publisher = learner("publisher")
        self.recovery = learner("recovery")
        max_attempts()
        self.setup_seconds = time.monotonic() - started

    def stop(self) -> None:
        if self.cache_publisher is not None:
            handshake.stop(self.cache_folder)
        for proc in (self.cache_publisher, self.worker, self.cache_worker):
            if proc is not None:
                proc.stop(grace=10)
        with contextlib.suppress(Exception):
            self.triggers.close()
        close_kit_connection()
        if self._redis_client is not None:
            with contextlib.suppress(Exception):
                self._redis_client.close()
        if self.redis is not None:
            self.redis.stop(grace=5)
        PROBE.stop()

    @property
    def broker(self) -> str:
        return f"private redis-server 127.0.0.1:{self.port}" if self.private else "the slot's broker database"

    # ------------------------------------------------------------ the private broker

    def _client(self):
        if self._redis_client is None:
            self._redis_client = redis_client(self.broker_url)
        return self._redis_client

    def broker_ping(self) -> bool:
        try:
            return bool(self._client().ping())
        except Exception:  # noqa: BLE001 - any failure means "not answering"
            return False

    def broker_start(self) -> None:
        self.redis = Process(self.redis_argv, cwd=WORK, log_path=LOG_DIR / "lab16-broker.log")
        self.redis.wait_ready(START_LIMIT, port=self.port)
        wait_until(self.broker_ping, START_LIMIT, t("the private broker to answer"), interval=0.05)

    def broker_stop(self) -> int:
        assert self.redis is not None
        pid = self.redis.pid
        self.redis.stop(grace=5)
        wait_until(lambda: not port_open(self.port), 30, t("the private broker to stop listening"),
                   interval=0.05)
        return pid

    def broker_idle(self) -> bool:
        if not self.broker_ping():
            return False
        client = self._client()
        waiting = sum(client.llen(q) for q in QUEUES)
        return waiting == 0 and client.hlen("unacked") == 0

    # ------------------------------------------------------------ publisher and recovery, driven here

    def publish_once(self) -> Exception | None:
        """One publish_one as `python publisher.py` runs it (in the probe): the exception it raised, if any."""
        try:
            with publishing():
                self.publisher.publish_one()
        except Exception as exc:  # noqa: BLE001 - a drill's fault may make it raise
            return exc
        return None

    def pump(self, limit: int = 40) -> int:
        """python publisher.py, driven from here (each publish_one in the probe): until nothing is due."""
        sent = 0
        with publishing():
            for _ in range(limit):
                if self.publisher.publish_one():
                    sent += 1
                elif not due_events():
                    break
        return sent

    def scan(self) -> int:
        return int(self.recovery.recover_batch() or 0)

    def wait_idle(self, seconds: float = 60) -> None:
        """Nothing waiting in the broker and no delivery under way (before a row: the worker is free)."""
        wait_until(lambda: self.broker_idle() and not open_deliveries(), seconds,
                   t("the worker to finish its messages"), interval=0.05)

    def drain(self, seconds: float = 90) -> None:
        """Publish what is due and let the worker finish it, until nothing is left to do."""
        deadline = time.monotonic() + seconds
        while True:
            self.pump()
            self.wait_idle(max(1.0, deadline - time.monotonic()))
            if not due_events():
                return
            assert time.monotonic() < deadline, t("events keep coming due; cannot drain")

    def wait_ended(self, job_id: str, n: int, seconds: float = 60) -> list[dict]:
        """The job's deliveries once at least n of them have ended (the probe wrote their end)."""
        try:
            wait_until(lambda: len(ended(job_id)) >= n, seconds, f"{n} deliveries of {job_id}", interval=0.05)
        except WaitTimeout:
            raise AssertionError(t("within {seconds:g}s the worker finished {n_ended} deliveries of job {job_id} "
                                   "(expected at least {n})", seconds=seconds, n_ended=len(ended(job_id)), n=n,
                                   job_id=short(job_id))) from None
        return ended(job_id)

    def product(self, n: int = 1) -> list[int]:
        rows = sql("SELECT id FROM products WHERE is_active=1 ORDER BY id LIMIT %s", (n,))
        return [int(r["id"]) for r in rows]
