"""Lesson 13's lab as its checks use it (not a lesson file): the kit's view of the database and a clean
backlog, the learner's modules, the two workers (paused and resumed by PID), the publisher loop, the probe's
events, the HTTP submit, one-shot calls of lab13_tools.py.  Facts and fixtures; nothing here decides a check.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from uuid import uuid4

from shared.lesson_celery import READY_MARK, redis_client, spawn
from shared.logs import LOG_DIR
from shared.events import job_events, read_events
from shared.settings import WORK, redact
from shared.hold_gate import HoldList
from shared.i18n import listed, t
from shared.probe import Probe
from shared.lesson_db import TERMINAL, active_jobs, close_open_jobs, job_row, kit_db, outbox_of, set_ago, sql
from shared.proc import Process, WaitTimeout, free_port, run_python, start_uvicorn, wait_all_ready, wait_until

GATE = HoldList(LOG_DIR, "lab13")  # lab13_worker.py's gate on the first file write
TOOLS = str(WORK / "lab13_tools.py")
QUEUES = ("exports.fast", "exports.bulk")
TRIGGER = "lab13_kit_slow_insert"  # lab13_gate.insert_hold's trigger, dropped by reset()

# The course's backlog queries (13.4): queued/running jobs and unpublished events, with their oldest ages.
BACKLOG_JOBS = """SELECT status, COUNT(*) AS jobs,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6))/1000000 AS oldest_age_seconds
FROM export_jobs WHERE status IN ('queued','running') GROUP BY status"""
BACKLOG_OUTBOX = """SELECT queue_name, COUNT(*) AS unpublished,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6))/1000000 AS oldest_unpublished_seconds
FROM export_outbox WHERE sent_at IS NULL GROUP BY queue_name"""


# ---------------------------------------------------------------- the kit's own view of the database

def event_of(job_id: str) -> dict | None:
    rows = outbox_of(job_id)
    return rows[0] if rows else None


def backlog() -> tuple[dict, dict]:
    """The course's backlog queries: {status: (jobs, oldest age s)}, {queue_name: (unpublished, oldest age s)}."""
    jobs = {r["status"]: (int(r["jobs"]), float(r["oldest_age_seconds"])) for r in sql(BACKLOG_JOBS)}
    outbox = {r["queue_name"]: (int(r["unpublished"]), float(r["oldest_unpublished_seconds"]))
              for r in sql(BACKLOG_OUTBOX)}
    return jobs, outbox


def show(jobs: dict) -> str:
    """A backlog query's answer: "queued 3 (oldest 9.8s), running 1 (oldest 3600.0s)", or "empty"."""
    shown = listed([t("{status} {n} (oldest {age:.1f}s)", status=status, n=n, age=age)
                    for status, (n, age) in sorted(jobs.items())])
    # Plain "empty" is taken: it is lesson 14's empty slot_key, with another Chinese, and the kit reads every
    # zh.po as one catalogue.  So this one carries its context before a "|" (GLib's Q_() msgid "context|text"),
    # cut off here; the Chinese has no "|".
    return shown or t("backlog|empty").rpartition("|")[2]


def oldest_queued() -> dict | None:
    rows = sql("SELECT id, created_at FROM export_jobs WHERE status='queued' ORDER BY created_at, id LIMIT 1")
    return rows[0] if rows else None


def age_jobs(job_ids: list[str], ages: list[int]) -> None:
    """Each job and its outbox event made `age` seconds old (created_at moved back by UPDATE, not waited for)."""
    for job, age in zip(job_ids, ages, strict=True):
        set_ago("export_jobs", "id", [job], age, "created_at")
        set_ago("export_outbox", "job_id", [job], age, "created_at")


def reset() -> None:
    """A clean backlog for the check that calls it (each check must stand alone)."""
    sql(f"DROP TRIGGER IF EXISTS {TRIGGER}")  # a verifier killed mid-check leaves it behind
    close_open_jobs(None, "status='cancelled', cancel_requested=TRUE, updated_at=NOW(6)")  # events: marked sent
    client = redis_client()
    try:
        client.delete(*QUEUES)
    finally:
        client.close()
    GATE.path.unlink(missing_ok=True)


def add_filler(n: int, running: int = 0, with_events: int = 0, age_seconds: int = 0) -> list[str]:
    """n kit rows that hold capacity like leftovers of earlier exercises: `running` of them running
    (a live lease of 10 minutes, so nothing claims them), `with_events` of the queued ones with an
    unsent event, the rest bare queued rows."""
    ids = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        for k, job in enumerate(ids):
            status = "running" if k < running else "queued"
            cur.execute(
                "INSERT INTO export_jobs (id, status, payload, attempts, lease_token, lease_until, deadline_at, "
                "created_at) VALUES (%s, %s, '[]', IF(%s='running', 1, 0), IF(%s='running', UUID(), NULL), "
                "IF(%s='running', DATE_ADD(NOW(6), INTERVAL 10 MINUTE), NULL), "
                "DATE_ADD(NOW(6), INTERVAL 10 MINUTE), DATE_SUB(NOW(6), INTERVAL %s SECOND))",
                (job, status, status, status, status, age_seconds))
        events = [job for k, job in enumerate(ids) if k >= running][:with_events]
        if events:
            cur.executemany("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)",
                            [(str(uuid4()), job) for job in events])
    return ids


def add_finished(n: int) -> list[str]:
    """n failed kit jobs: finished, so they hold no place (for remove_jobs once the check is done)."""
    ids = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        cur.executemany("INSERT INTO export_jobs (id, status, payload, attempts, error_code, deadline_at) VALUES "
                        "(%s, 'failed', '[]', 3, 'attempts_exhausted', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))",
                        [(job,) for job in ids])
    return ids


# ---------------------------------------------------------------- the learner's modules (in the probe)

learner = Probe()  # the learner's modules load there, never in the judge


def store(*more: str):
    """The learner's state_store (in the probe), checked to have what the capacity checks need."""
    return learner.module("state_store", "transaction", "submit_snapshot", "admit_export", "lock_admission",
                          "CapacityExceeded", *more)


def configured_limit() -> int:
    default = learner.call("shared.lesson_db:limit_default")
    assert type(default) is int and default >= 1, t("admit_export needs a limit parameter with a positive integer "
                                                    "default (found {default!r}): it is the one capacity every "
                                                    "submit path uses", default=default)
    return default


def submit_quietly(product_ids: list[int]) -> str:
    answer = learner.call("lab13_learner:submit", product_ids)
    if "capacity" in answer:
        raise AssertionError(t("the submit was refused with CapacityExceeded while only {active_count} jobs are "
                               "queued or running", active_count=active_jobs()))
    assert isinstance(answer.get("job"), str), t("submit_snapshot should return the job id, got {job!r}",
                                                 job=answer.get('job'))
    return answer["job"]


# ---------------------------------------------------------------- the kit's helper, one call (lab13_tools.py)

def tool(args: list[str], env: dict) -> dict:
    """python lab13_tools.py ARGS in this environment (its learner code runs there): the JSON it answered."""
    done = run_python([TOOLS, *args], cwd=WORK, timeout=30, env=env)
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, t("the checker's helper failed: {stdout}",
                                             stdout=redact(done.stdout)[-300:])
    return json.loads(lines[-1])


# ---------------------------------------------------------------- workers and the publisher loop

_WORKERS: dict[str, Process] = {}


def workers() -> dict[str, Process]:
    """The lesson's two workers, started once (when a check first needs them) and shared."""
    if not _WORKERS:
        procs = {kind: spawn([sys.executable, "-m", "celery", "-A", "lab13_worker:app", "worker", "-l", "INFO", "-Q",
                              f"exports.{kind}", "--concurrency=1", "--prefetch-multiplier=1", "-n", f"{kind}@%h",
                              "--without-mingle", "--without-gossip"], f"worker-{kind}.log")
                 for kind in ("fast", "bulk")}
        wait_all_ready(procs.values(), 40, log_contains=READY_MARK)
        _WORKERS.update(procs)
    for kind, proc in _WORKERS.items():
        assert proc.alive(), t("the {kind} worker exited: {log_tail}", kind=kind, log_tail=redact(proc.log_tail(4)))
    return _WORKERS


def stop_workers() -> None:
    """At the verifier's end: the workers it started, by PID."""
    for proc in _WORKERS.values():
        proc.stop(grace=10)


def pause(procs, sig: int) -> None:
    """SIGSTOP or SIGCONT to each worker's process group (the pool children too)."""
    for proc in procs.values():
        proc.signal_group(sig)


@contextlib.contextmanager
def publisher_loop():
    """The learner's publish_one, called in a loop by a kit process until the check is done."""
    folder = LOG_DIR / f"lab13-publisher-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    proc = Process([sys.executable, TOOLS, "publish", str(folder)], cwd=WORK, log_path=folder / "publisher.log")
    try:
        proc.wait_ready(20, log_contains="publisher loop running")
        yield proc
    finally:
        (folder / "stop").write_text("stop")
        proc.stop(grace=5)


# ---------------------------------------------------------------- the probe's events (lab13_worker.py)

# The probe's events (with these fields): an "end" with its task_id (a worker ran that message to its end; an
# event's id is its task id), a gate's "hold" or "release" of a job.
recorded = functools.partial(read_events, GATE.events)


def starts(job_id: str) -> list[dict]:
    return job_events(GATE.events, job_id, task="products.export")


def first_held(job_ids: list[str], seconds: float, who: str) -> str:
    """The first of these jobs a worker took and is now held writing (the probe's "hold" event)."""
    return GATE.wait_held(job_ids, seconds, f"the {who} worker to start a held job", late=lambda: t(
        "the {who} worker did not start any of the jobs within {seconds:g}s: {stuck_reason}", who=who,
        seconds=seconds, stuck_reason=stuck_reason(job_ids[0])))["job"]


def wait_confirmed(c, job_ids: list[str], publisher: Process, seconds: float = 20) -> None:
    """Every job's outbox event confirmed (sent_at set) while the workers are paused.  Its confirm has
    committed, so no worker's claim can meet its lock any more (that race is 13.7's).  A publisher only
    sends: one that waits for a worker to run the job never gets here."""
    def unsent():
        return [j for j in job_ids if not ((e := event_of(j)) and e["sent_at"] is not None)]
    try:
        wait_until(lambda: not unsent(), seconds, "the publisher to confirm the events", interval=0.05)
    except WaitTimeout:
        left = unsent()
        for line in publisher.log_tail(3).splitlines():
            c.note("  publisher: " + redact(line)[:200])
        raise AssertionError(t("with the workers paused, the publisher confirmed only {n_job_ids} of {n_job_ids2} "
                               "events within {seconds:g}s: a publisher only sends (send_task, then sent_at) and "
                               "never waits for a worker to run the job before it sends the next. The first "
                               "unconfirmed one: {stuck_reason}", n_job_ids=len(job_ids) - len(left), seconds=seconds,
                               n_job_ids2=len(job_ids), stuck_reason=stuck_reason(left[0]))) from None


def wait_done(job_ids: list[str], seconds: float) -> dict[str, dict]:
    def all_done():
        rows = {j: job_row(j) for j in job_ids}
        return rows if all(r and r["status"] in TERMINAL for r in rows.values()) else None
    try:
        return wait_until(all_done, seconds, "the jobs to finish", interval=0.05)
    except WaitTimeout:
        return {j: job_row(j) for j in job_ids}


def queue_holding(event_id: str) -> str | None:
    """The Redis queue in which this event's message waits (LRANGE: nothing is consumed), if any."""
    from shared.lesson_celery import queued_task_ids
    return next((q for q in ("exports", *QUEUES) if event_id in queued_task_ids(q)), None)


def waits_elsewhere(job_id: str, consumed: str) -> str | None:
    """The queue, other than `consumed`, in which this job's sent message waits.  A fact, not a guess:
    only that queue's workers can ever take it (the kit starts each worker on one queue)."""
    event = event_of(job_id)
    if event is None or event["sent_at"] is None:
        return None
    queue = queue_holding(event["id"])
    return queue if queue != consumed else None


def stuck_reason(job_id: str) -> str:
    """Why a job did not finish: its event, the broker's queues, the deliveries (bilingual pieces)."""
    event = event_of(job_id)
    if event is None:
        return t("it has no outbox event")
    if event["sent_at"] is None and event["live"]:
        return t("the publisher claimed its event (queue_name={queue_name}) but has not confirmed it: it is stuck "
                 "between its send and its confirm (waiting for the job's result, for example)",
                 queue_name=event['queue_name'])
    if event["sent_at"] is None:
        return t("its event (queue_name={queue_name}) is still unsent: the publisher is stuck or failing (see the "
                 "publisher log)", queue_name=event['queue_name'])
    queue = queue_holding(event["id"])
    if queue == "exports":
        return t("its message waits in the Redis queue exports, which no worker consumes: send_task needs "
                 "queue=event[\"queue_name\"]")
    if queue:
        return t("its message waits in the Redis queue {queue}", queue=queue)
    started = starts(job_id)
    unclaimed = [e for e in recorded(kind="end", task_id=event["id"])
                 if isinstance(e.get("retval"), dict) and e["retval"].get("claimed") is False]
    row = job_row(job_id)
    if unclaimed and row and row["status"] == "queued":
        return t("the worker got the message but claim returned None (claimed False) while the job is still queued: "
                 "the row was locked at that instant. With FOR UPDATE SKIP LOCKED, the outbox confirm's foreign-key "
                 "check (it updates sent_at) makes claim skip it; claim one known row with FOR UPDATE (check 13.7, "
                 "and the guide)")
    if started:
        return t("{node} took it from {queue} but has not finished it", node=started[-1].get('node'),
                 queue=started[-1].get('queue'))
    return t("its event was sent but no worker started it")


# ---------------------------------------------------------------- HTTP submit path

def http_app() -> tuple[str, str]:
    """The folder's api_db:app when it has POST /exports, else the kit's route around accept_export."""
    learner.module("admission_adapter", "accept_export")
    with contextlib.suppress(Exception):
        if learner.call("lab13_learner:api_db_has_post_exports") is True:
            return "api_db:app", "api_db.py POST /exports"
    return "lab13_api:app", t("the kit's POST /exports route around your accept_export (api_db.py has no POST "
                              "/exports)")


@contextlib.contextmanager
def serve(app: str, env: dict | None = None):
    port = free_port()
    try:
        proc, _ = start_uvicorn(app, WORK, LOG_DIR / f"lab13-http-{port}.log", port=port, timeout=20, env=env)
    except WaitTimeout as exc:
        raise AssertionError(t("the HTTP app did not start: {exc}", exc=redact(str(exc))[-300:])) from None
    try:
        import httpx2
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        proc.stop()


def body_of(response) -> object:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]
