"""The grading machine's side of distributed grading: the Celery app and its settings (the same on both
sides), the results store in the broker's Redis (written once per key, SET NX) and the list of executions
per key, and the task that unpacks one folder and grades it the local way.

Delivery follows the kit's own lesson 09: late ack, requeue when a pool child is lost, one message
reserved per process, a visibility timeout longer than the slowest grading.  So a machine that dies
mid-grade costs a redelivery, never a lost folder, and a redelivery writes nothing new: the first
stored result stands (SET NX), and each execution is recorded (`deliveries`) so duplicates are counted.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from celery import Celery

from checks import grade
from checks.box import availability
from checks.packing import PackRefused, results_to_wire, unpack
from checks.results import errored
from checks.sandbox import boxing
from checks.selection import load, select
from checks.workdir import STATE_DIR, UsageError
from shared.i18n import t
from shared.manifest import KIT_ROOT, MANIFEST

QUEUE = "tasklab-grade"
RESULTS = "tasklab:grade:result:"         # + key -> the stored grading (JSON), written once (SET NX)
DELIVERIES = "tasklab:grade:deliveries:"  # + key -> one JSON line per execution that started
KEEP_SECONDS = 30 * 24 * 3600             # results and delivery lists expire after a month
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
    results_store.cache_clear()
    return app


@functools.lru_cache(maxsize=1)
def results_store():
    """Redis on the broker's server: the results store and the delivery lists (one server to secure)."""
    import redis
    url = app.conf.broker_url
    if not url or not url.startswith(("redis://", "rediss://")):
        raise UsageError(t("distributed grading needs a Redis broker (redis:// or rediss://)"))
    return redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5, health_check_interval=15)


if os.environ.get("LAB_GRADE_BROKER"):  # `celery -A checks.grading_worker worker` finds its broker here
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


# --- the worker side -----------------------------------------------------------------------------------

def store_result(key: str, entry: dict) -> bool:
    """Write once: True for the first writer; a later one (a redelivery) leaves the first result alone."""
    return bool(_patient(lambda: results_store().set(RESULTS + key, json.dumps(entry),
                                                     nx=True, ex=KEEP_SECONDS)))


def record_delivery(key: str, delivery: dict) -> None:
    def push():
        with results_store().pipeline() as pipe:
            pipe.rpush(DELIVERIES + key, json.dumps(delivery)).expire(DELIVERIES + key, KEEP_SECONDS).execute()
    _patient(push)


def stored_result(key: str) -> dict | None:
    """The grading stored for `key`, as the instructor's side collects it; None while there is none."""
    raw = _patient(lambda: results_store().get(RESULTS + key))
    return json.loads(raw) if raw else None


def deliveries_of(key: str) -> list[dict]:
    """Every execution of `key`'s task that started, oldest first (redeliveries included)."""
    return [json.loads(line) for line in _patient(lambda: results_store().lrange(DELIVERIES + key, 0, -1))]


def grade_packed(name: str, packed: bytes, lesson_ids: list[str], key: str) -> dict:
    """Unpack into a fresh folder and grade it the local way; return the results on the wire."""
    data = load()
    lessons = select(data, lesson_ids, allow_planned=True)  # the instructor's side chose and checked them
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        lab = Path(tmp).resolve() / "tasks_lab"
        # Its own work/log folders: two deliveries of one folder on one machine never share a scratch copy.
        safe = re.sub(r"[^\w.-]", "_", name)[:80]
        student = grade.Student(raw=str(lab), name=f"{safe}-{secrets.token_hex(4)}")  # its folders: grade.scope_of
        wanted, mine = key.rsplit(":", 1)[-1], kit_version()
        try:
            if not mine.startswith(wanted):
                raise PackRefused(t("this grading machine runs kit {mine}, the instructor's is {wanted}: update it "
                                    "(git pull) and restart the worker", mine=mine[:12], wanted=wanted))
            unpack(packed, lab)
        except (PackRefused, OSError) as exc:
            student.error = str(exc) if isinstance(exc, PackRefused) else t(
                "the packed folder could not be unpacked: {exc}", exc=exc)
            student.results = errored(lessons, student.error)
        else:  # every lesson boxed, as `checks grade`; a grading machine keeps no learner files after it
            grade.grade_one(student, lessons, data)
        wire = results_to_wire(student.results, student.error, str(lab))
        wire["retry"] = not mine.startswith(wanted)  # not the folder's fault: grade it again next time
        return wire


TEMP_PREFIX = grade.TEMP_PREFIX  # + pid: a grading's temporary copy, work and log folders


def sweep_leftovers() -> list[Path]:
    """A SIGKILLed pool child never ran its cleanup: remove the folders named after processes that are
    gone (this machine's only; the pid in the name says whose)."""
    return grade.sweep_leftovers([Path(tempfile.gettempdir()), *(STATE_DIR / kind / "grade" for kind in grade.SCRATCH)])


@app.task(name="tasklab.grade_folder", bind=True, acks_late=True, reject_on_worker_lost=True)
def grade_folder(self, key: str, name: str, packed_b64: str, lessons: list[str]) -> dict:
    """Grade one packed folder; safe to run twice for one key (the first stored result stands)."""
    host = self.request.hostname or "local"
    record_delivery(key, {"host": host, "pid": os.getpid(), "task": self.request.id, "at": time.time(),
                          "redelivered": bool((self.request.delivery_info or {}).get("redelivered"))})
    if _patient(lambda: results_store().exists(RESULTS + key)):
        return {"key": key, "graded": False}  # graded already; the ack was lost (a crash or a restart)
    sweep_leftovers()
    started_before = _patient(lambda: results_store().llen(DELIVERIES + key)) - 1
    if started_before >= MAX_EXECUTIONS:  # a folder whose grading kills its worker every time: stop here
        message = t("grading this folder started {started_before} times and each time the grading process died "
                    "before a result (killed? out of memory?): not retried again. Grade it alone to see why: python "
                    "-m checks grade --lab DIR", started_before=started_before)
        entry = {"key": key, "name": name, "worker": host, "pid": os.getpid(), "kit": kit_version(), "seconds": 0.0,
                 "result": {"lab": "", "error": message, "lessons": [], "retry": False}}
        return {"key": key, "graded": True, "stored": store_result(key, entry)}
    started = time.monotonic()
    try:
        wire = grade_packed(name, base64.b64decode(packed_b64), lessons, key)
    except Exception as exc:  # noqa: BLE001 - this machine's fault, not the folder's: said now, graded next run
        message = t("grading machine {host} failed: {name}: {exc}", host=host, name=type(exc).__name__, exc=exc)
        wire = {"lab": "", "error": message, "lessons": [], "retry": True}
    entry = {"key": key, "name": name, "worker": host, "pid": os.getpid(), "kit": kit_version(),
             "seconds": round(time.monotonic() - started, 3), "result": wire}
    return {"key": key, "graded": True, "stored": store_result(key, entry)}


def run_worker(broker_url: str, concurrency: int = 1, name: str | None = None, result_url: str | None = None,
               visibility: int = VISIBILITY_SECONDS, loglevel: str = "INFO") -> None:
    """A Celery worker for the grading queue (prefork, -O fair, prefetch 1); returns when it stops."""
    if boxing() != "on":
        raise UsageError(t("no box can be made for learner code here ({availability}): this machine cannot grade",
                           availability=availability()[1]))
    kit_version()  # fixed now, before the pool forks: the version of the code this worker runs
    configure(broker_url, result_url, visibility)
    argv = ["worker", "-Q", QUEUE, "-P", "prefork", "-c", str(concurrency), "-O", "fair",
            "--prefetch-multiplier", "1", "-l", loglevel, "--without-gossip", "--without-mingle"]
    if name:
        argv += ["-n", name]
    app.worker_main(argv)
