"""Lessons 11–15: export jobs kept in MySQL — a fixed snapshot at submit, leases with tokens, CAS to finish.

Lesson 12 made submit_snapshot write the job AND its outbox event in one transaction, so an accepted
job always has a pending "announce me" row (publisher.py sends it).

Lesson 13 puts a capacity gate in front of that transaction and a route on the event:

    admit_export(cur)        lock the gate row, count queued+running, CapacityExceeded at the limit
    submit_snapshot(ids)     gate → snapshot → job → outbox event with its queue_name, one commit
                             (≤ 30 rows: exports.fast, more: exports.bulk)

The admission limit is one number for every path that creates jobs (this submit, and later schedules
and replays): ADMISSION_LIMIT, 100 unless EXPORT_ADMISSION_LIMIT says otherwise (.env.tasks or the
environment).  Every path calls admit_export(cur) and so uses the same value.

    submit_snapshot([3, 7])          -> job_id      (row 'queued' + unsent, routed outbox event, one commit)
    claim(job_id)                    -> job | None  ('running', new lease_token, attempts + 1)
    finish(job_id, token, ref)       -> bool        (only the current, unexpired token publishes)
    renew_lease(job_id, token)       -> bool        (exercise: +30 s, never past deadline_at)

Every public function runs its own short transaction and ends it (commit or rollback) before
returning: no caller keeps a row lock while it writes a file, waits on the network or sleeps.  The
connection itself is kept for the thread's next transaction (lesson 13, see transaction()).

Lesson 15 adds the executor's side of cancellation and the user's request for it:

    can_continue(job_id, token)      -> bool        (still ours, running, in lease and deadline, not cancelled)
    request_cancel(job_id)           -> dict | None (cancel_requested on an active job; the row as it now is)

The connection settings come from DATABASE_URL in .env.tasks (never printed).  The code runs
on MySQL 8.4 and MariaDB 10.11; the few statements that differ between them live in the
"server differences" block below and nowhere else.
"""

import json
import os
import re
import threading
from contextlib import contextmanager
from urllib.parse import parse_qs, unquote, urlsplit
from uuid import uuid4

import pymysql
from dotenv import load_dotenv
from pymysql.cursors import DictCursor

# The local file fills in what the environment does not already set (a deployment's value wins).
load_dotenv(".env.tasks")

MAX_PRODUCTS = 100     # one export holds 1..100 products
LEASE_SECONDS = 30     # enough for a small local file; long exports must renew (see renew_lease)
MAX_ATTEMPTS = 3       # real claims, counted in the row; message redeliveries do not count
DEADLINE_MINUTES = 10  # after this the job may no longer publish, whatever its lease says
FAST_MAX_ROWS = 30     # a snapshot of at most this many rows is a short job: exports.fast
FAST_QUEUE = "exports.fast"  # the CHECK on export_outbox.queue_name allows exactly these two
BULK_QUEUE = "exports.bulk"


def configured_admission_limit() -> int:
    """The one admission limit: EXPORT_ADMISSION_LIMIT if set (an experiment, e.g. 5), else 100."""
    raw = os.environ.get("EXPORT_ADMISSION_LIMIT", "100").strip()
    if not re.fullmatch(r"[0-9]{1,9}", raw) or int(raw) < 1:
        # A typo here must stop the service at start, not silently admit without a limit.
        raise ValueError("EXPORT_ADMISSION_LIMIT must be a positive integer")
    return int(raw)


# Read once, after .env.tasks is loaded.  admit_export's default is this value, so every path that
# calls admit_export(cur) — submit here, schedules and replays later — admits up to the same number.
ADMISSION_LIMIT = configured_admission_limit()


# --- server differences: MySQL 8.4 and MariaDB 10.11, in one place -------------------------------

# CHECK constraint violated: MySQL reports 3819, MariaDB 4025.
CHECK_VIOLATION_CODES = (3819, 4025)


def is_mariadb(version: str) -> bool:
    return "mariadb" in version.lower()


def statement_limit_sql(version: str) -> str:
    """A server-side cap on one statement's run time (3 s), in each server's own words."""
    if is_mariadb(version):
        # MariaDB: seconds, and it applies to every statement, writes included.
        return "SET SESSION max_statement_time = 3"
    # MySQL: milliseconds, and it only applies to read-only SELECT statements.
    return "SET SESSION max_execution_time = 3000"


def isolation_variable(version: str) -> str:
    # MySQL 8 removed tx_isolation; MariaDB only gained transaction_isolation in 11.1.
    return "@@session.tx_isolation" if is_mariadb(version) else "@@session.transaction_isolation"


def is_check_violation(exc: Exception) -> bool:
    return isinstance(exc, pymysql.MySQLError) and bool(exc.args) and exc.args[0] in CHECK_VIOLATION_CODES


# --- connection ----------------------------------------------------------------------------------

def decode_url_part(value: str) -> str:
    """Percent-decode one URL part, refusing what unquote would silently let through."""
    # unquote leaves a stray '%' (as in '%zz' or a trailing '%') untouched: the password would
    # then be wrong in a way that only shows up as "access denied" much later.
    if re.search(r"%(?![0-9A-Fa-f]{2})", value):
        raise ValueError("invalid percent-encoding in the database URL")
    # errors="strict": bytes that are not UTF-8 (such as a lone %E9) raise instead of becoming '\ufffd'.
    return unquote(value, encoding="utf-8", errors="strict")


def _url_settings() -> dict:
    """The connection arguments from DATABASE_URL.  Error messages name the part, never the URL."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise ValueError("DATABASE_URL is not set (expected in .env.tasks)")
    parts = urlsplit(url)
    if parts.scheme != "mysql+pymysql":
        raise ValueError("the database URL must start with mysql+pymysql://")
    if not parts.hostname:
        raise ValueError("the database URL has no host")
    if not parts.username or parts.password is None:
        raise ValueError("the database URL needs a user and a password")
    if parts.fragment:
        raise ValueError("the database URL must not have a #fragment")
    port = parts.port or 3306  # .port raises ValueError itself for a port that is not a number
    options = parse_qs(parts.query, keep_blank_values=True, strict_parsing=True) if parts.query else {}
    if options and options != {"charset": ["utf8mb4"]}:
        raise ValueError("the only query option allowed in the database URL is charset=utf8mb4")
    database = decode_url_part(parts.path.removeprefix("/"))
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", database):
        raise ValueError("the database name in the URL must be 1-64 letters, digits or _")
    return {"host": parts.hostname, "port": port, "user": decode_url_part(parts.username),
            "password": decode_url_part(parts.password), "database": database}


LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


def connect():
    """A new connection in the lab's session settings: UTC, READ COMMITTED, short waits."""
    settings = _url_settings()
    conn = pymysql.connect(
        **settings, charset="utf8mb4", cursorclass=DictCursor, autocommit=False,
        # Without TLS options PyMySQL "prefers" TLS: it builds a fresh certificate store for every
        # connection (about 25 ms of CPU, more than the whole transaction) and then checks no server
        # certificate anyway.  Loopback has no network to protect, so skip it there; a database across
        # a network needs verified TLS (ssl_ca=...), set up on purpose — not this silent attempt.
        ssl_disabled=settings["host"] in LOOPBACK_HOSTS,
        # Bounded everywhere: connecting, each socket read and write, and (below) lock waits.
        connect_timeout=3, read_timeout=3, write_timeout=3,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # DATETIME columns hold UTC; read them as UTC
            # Each statement sees the latest committed rows (queues and capacity counts need that).
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")  # a busy row fails fast
            cur.execute(statement_limit_sql(conn.get_server_info()))
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except pymysql.MySQLError:
            pass
        conn.close()
        raise
    return conn


# Lesson 13: connections are kept between transactions, one per thread.  Measured on the durable path,
# opening a connection (handshake, login, four SETs) cost more than the transaction itself.  What stays
# the same: every transaction() still commits or rolls back before it returns, so nothing holds a lock
# or a snapshot while the caller writes a file or waits on the network — an idle connection holds
# neither.  A real service would use a pool with an upper bound; a thread-local one is enough here.
_idle = threading.local()


def _take_connection():
    """This thread's idle connection if it still answers, otherwise a new one."""
    conn, owner = getattr(_idle, "conn", None), getattr(_idle, "pid", None)
    _idle.conn = None  # in use now: a transaction() nested inside this one opens its own
    if conn is not None and owner == os.getpid():
        try:
            conn.ping(reconnect=False)  # a restarted server or an expired session shows here, before any work
            return conn
        except pymysql.MySQLError:
            _close_quietly(conn)
    # A connection made before a fork belongs to the parent process: never use or close it here
    # (closing would send QUIT on the parent's session); it is simply dropped.
    return connect()


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except pymysql.MySQLError:
        pass  # already closed or broken: nothing left to release


@contextmanager
def transaction():
    """One short transaction: commit on success, roll back on any error, then hand the connection back.

    The connection is kept for this thread's next transaction only after a clean COMMIT; after any
    error it is closed, because its state is then unknown.  If the connection breaks during COMMIT,
    the outcome is unknown too: the error propagates and the caller must look the job up by id before
    doing anything again (never assume a rollback).
    """
    conn = _take_connection()
    try:
        with conn.cursor() as cur:
            yield cur
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except pymysql.MySQLError:
            pass  # the original error matters more than a failed rollback on a broken link
        _close_quietly(conn)
        raise
    previous = getattr(_idle, "conn", None)
    if previous is not None:  # a nested transaction() left one behind: keep only one per thread
        _close_quietly(previous)
    _idle.conn, _idle.pid = conn, os.getpid()


def describe_session() -> dict:
    """What this connection runs with: server version, time zone, isolation (for a first look)."""
    with transaction() as cur:
        cur.execute("SELECT VERSION() AS version")
        version = cur.fetchone()["version"]
        cur.execute(f"SELECT @@session.time_zone AS time_zone, {isolation_variable(version)} AS isolation")
        return {"version": version, **cur.fetchone()}


# --- submit: the snapshot is taken once, inside the transaction that creates the job --------------

def decode_payload(raw) -> list[dict]:
    # PyMySQL hands a JSON column back as text (MariaDB stores JSON as text anyway).
    value = json.loads(raw) if isinstance(raw, (str, bytes, bytearray)) else raw
    if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
        raise ValueError("the job payload is not a list of product rows")
    return value


def read_snapshot(cur, product_ids: list[int]) -> list[dict]:
    """The chosen products as they are now, or ValueError before anything is written."""
    if not isinstance(product_ids, list) or not 1 <= len(product_ids) <= MAX_PRODUCTS:
        raise ValueError(f"choose between 1 and {MAX_PRODUCTS} products")
    # type(...) is int, not isinstance: True is an int to Python but never a product id.
    if any(type(product_id) is not int or product_id <= 0 for product_id in product_ids):
        raise ValueError("product ids must be positive integers")
    ids = sorted(set(product_ids))
    marks = ",".join(["%s"] * len(ids))  # placeholders only: the values travel as parameters
    cur.execute(f"SELECT id, name, description, is_active, price_cents FROM products "
                f"WHERE id IN ({marks}) ORDER BY id", ids)
    rows = cur.fetchall()
    if len(rows) != len(ids):
        found = {row["id"] for row in rows}
        missing = [product_id for product_id in ids if product_id not in found][:5]
        raise ValueError(f"unknown product ids: {missing}")
    for row in rows:  # plain JSON types, the same on both servers
        row["is_active"] = bool(row["is_active"])
        row["price_cents"] = int(row["price_cents"])
    return rows


class CapacityExceeded(Exception):
    """The service holds as many queued+running exports as it may: try again later (HTTP 503)."""


def lock_admission(cur) -> None:
    """Take the admission gate: one fixed row that every job-creating transaction locks first.

    Whoever holds it may count and insert; the others wait here (at most innodb_lock_wait_timeout)
    and then count again, so two submits can never both see "one place left".
    """
    cur.execute("SELECT id FROM export_admission_gate WHERE id=1 FOR UPDATE")
    if cur.fetchone() is None:
        # Without the row FOR UPDATE locks nothing and the gate would be open: refuse instead.
        raise RuntimeError("the admission gate row is missing: run schema_capacity.sql first")


def admit_export(cur, limit: int = ADMISSION_LIMIT) -> None:
    """Inside the caller's transaction: lock the gate, then raise CapacityExceeded at the limit.

    The caller inserts the job in the same transaction, before it commits — that commit also
    releases the gate.  Counting without the gate (or in another transaction) lets concurrent
    submitters all read the same count and all insert.
    """
    if type(limit) is not int or limit < 1:  # bool is not a limit either
        raise ValueError("limit must be a positive integer")
    lock_admission(cur)
    # READ COMMITTED (set in connect): this count sees every job committed before we got the gate.
    # Both states hold capacity: a running job still occupies a worker and a connection.
    cur.execute("SELECT COUNT(*) AS total FROM export_jobs WHERE status IN ('queued','running')")
    if cur.fetchone()["total"] >= limit:
        raise CapacityExceeded("export capacity reached")


def queue_for(rows: list[dict]) -> str:
    """Short snapshots go to exports.fast, long ones to exports.bulk (stored with the event)."""
    return FAST_QUEUE if len(rows) <= FAST_MAX_ROWS else BULK_QUEUE


def submit_snapshot(product_ids: list[int]) -> str:
    """Admit, then create a queued job (payload = the products now) and its routed, unsent outbox event.

    Gate, count, job and event share one connection and one transaction: at capacity nothing is
    written; otherwise job and event commit together.  The job goes before the event because the
    outbox's foreign key is checked at once.  Nothing is sent to the broker here — publisher.py
    does that after the commit, to the queue named in the event.
    """
    job_id = str(uuid4())
    with transaction() as cur:
        admit_export(cur)  # first: CapacityExceeded here leaves nothing behind
        rows = read_snapshot(cur, product_ids)  # invalid input raises here: nothing inserted
        cur.execute(
            "INSERT INTO export_jobs (id, payload, deadline_at) "
            "VALUES (%s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (job_id, json.dumps(rows, ensure_ascii=False), DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the job insert did not create exactly one row")
        # The route is stored with the event, so a re-sent event still goes to the same queue.
        cur.execute("INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, %s)",
                    (str(uuid4()), job_id, queue_for(rows)))
        if cur.rowcount != 1:
            raise RuntimeError("the outbox insert did not create exactly one row")
    return job_id  # committed: only now may an HTTP adapter answer 202


# --- claim and finish: conditional updates, each in its own short transaction ---------------------

# Who may claim: queued, due, not cancelled, attempts and deadline left.  An expired 'running' job
# is NOT claimable: recovery (lesson 15) must first put it back to 'queued' with a backoff.
CLAIMABLE = """status='queued' AND cancel_requested=FALSE AND attempts<%s
               AND deadline_at>NOW(6) AND next_attempt_at<=NOW(6)"""


def claim(job_id: str) -> dict | None:
    """Take the lease on a claimable job: {id, payload, lease_token, attempts}, or None."""
    token = str(uuid4())
    with transaction() as cur:
        # Lesson 13: FOR UPDATE, no longer SKIP LOCKED.  This is one known row, and whatever locks it
        # does so for a moment: another claimer's short transaction, or the foreign-key check that the
        # outbox confirm (UPDATE … SET sent_at) makes on this very job while the message is already on
        # its way.  Skipping would read "locked for a millisecond" as "not claimable" and leave a queued
        # job that no message wakes again.  So wait (at most innodb_lock_wait_timeout, 1 s), then the
        # conditions are read again on the latest row: a job someone else claimed is no longer queued.
        # SKIP LOCKED stays where it belongs: scans that may take any row (outbox claim, recovery).
        # (None means "not claimable now" — it does not mean the job does not exist.)
        cur.execute(f"SELECT id FROM export_jobs WHERE id=%s AND {CLAIMABLE} FOR UPDATE",
                    (job_id, MAX_ATTEMPTS))
        if cur.fetchone() is None:
            return None
        # The same conditions again: the UPDATE is the compare-and-set, not just the lock above.
        cur.execute(
            f"""UPDATE export_jobs SET status='running', attempts=attempts+1, lease_token=%s,
                   lease_until=DATE_ADD(NOW(6), INTERVAL %s SECOND), error_code=NULL, updated_at=NOW(6)
                WHERE id=%s AND {CLAIMABLE}""",
            (token, LEASE_SECONDS, job_id, MAX_ATTEMPTS),
        )
        if cur.rowcount != 1:
            return None
        cur.execute("SELECT id, payload, lease_token, attempts FROM export_jobs WHERE id=%s", (job_id,))
        job = cur.fetchone()
        if job is None or job["lease_token"] != token:
            raise RuntimeError("the claimed row changed inside its own locked transaction")
        job["payload"] = decode_payload(job["payload"])
    return job  # committed: the caller works on the file with no transaction open


def finish(job_id: str, token: str, result_ref: str) -> bool:
    """Publish result_ref if this token still owns a live lease; False means: your work is not the result."""
    with transaction() as cur:
        cur.execute(
            """UPDATE export_jobs SET status='succeeded', result_ref=%s, error_code=NULL, updated_at=NOW(6)
               WHERE id=%s AND status='running' AND lease_token=%s
                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE""",
            (result_ref, job_id, token),
        )
        return cur.rowcount == 1


def renew_lease(job_id: str, token: str) -> bool:
    """Exercise: extend a live lease by 30 s (never past deadline_at).  False: the lease is lost."""
    live = """id=%s AND lease_token=%s AND status='running' AND lease_until>NOW(6)
              AND deadline_at>NOW(6) AND cancel_requested=FALSE"""
    with transaction() as cur:
        cur.execute(
            f"""UPDATE export_jobs
                SET lease_until=LEAST(DATE_ADD(NOW(6), INTERVAL %s SECOND), deadline_at)
                WHERE {live}""",
            (LEASE_SECONDS, job_id, token),
        )
        # rowcount 0 can also mean "already at this end time" (capped at deadline_at): ask again.
        cur.execute(f"SELECT 1 AS ok FROM export_jobs WHERE {live}", (job_id, token))
        return cur.fetchone() is not None


# --- lesson 15: cancellation is a durable request the executor must honour ------------------------

def can_continue(job_id: str, token: str) -> bool:
    """May this executor keep working?  Ask at every work boundary (before each chunk, before the write).

    True only while the token still owns a live lease on a running job that is inside its deadline
    and not asked to cancel.  A True now is no promise for later: finish() checks the same things again.
    """
    with transaction() as cur:
        cur.execute(
            """SELECT id FROM export_jobs
               WHERE id=%s AND lease_token=%s AND status='running'
                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE""",
            (job_id, token),
        )
        return cur.fetchone() is not None


def request_cancel(job_id: str) -> dict | None:
    """Ask an active job to stop; the row as it stands afterwards, or None if there is no such job.

    Only queued/running jobs take the flag; a finished job keeps its outcome.  The flag is a request:
    a running executor stops at its next can_continue, and finish() refuses it; the recovery scan turns
    the job into 'cancelled' (at once when queued, after the lease runs out when running).  Show users
    "cancel requested" until the status itself says cancelled.
    """
    with transaction() as cur:
        cur.execute(
            """UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6)
               WHERE id=%s AND status IN ('queued','running')""",
            (job_id,),
        )
        # rowcount 0 is not "missing": a repeated cancel changes nothing, a finished job is left alone.
        cur.execute("SELECT id, status, cancel_requested FROM export_jobs WHERE id=%s", (job_id,))
        row = cur.fetchone()
    if row is not None:
        row["cancel_requested"] = bool(row["cancel_requested"])
    return row
