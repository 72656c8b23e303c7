"""Lessons 11–12: export jobs kept in MySQL — a fixed snapshot at submit, leases with tokens, CAS to finish.

Lesson 12 changes one function: submit_snapshot now writes the job AND its outbox event in one
transaction, so an accepted job always has a pending "announce me" row (publisher.py sends it).

Every public function opens its own short transaction and closes it before returning, so no
caller can keep a row lock while it writes a file, waits on the network or sleeps.

    submit_snapshot([3, 7])          -> job_id      (row 'queued' + unsent export_outbox event, one commit)
    claim(job_id)                    -> job | None  ('running', new lease_token, attempts + 1)
    finish(job_id, token, ref)       -> bool        (only the current, unexpired token publishes)
    renew_lease(job_id, token)       -> bool        (exercise: +30 s, never past deadline_at)

The connection settings come from DATABASE_URL in .env.tasks (never printed).  The code runs
on MySQL 8.4 and MariaDB 10.11; the few statements that differ between them live in the
"server differences" block below and nowhere else.
"""

import json
import os
import re
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


def connect():
    """A new connection in the lab's session settings: UTC, READ COMMITTED, short waits."""
    conn = pymysql.connect(
        **_url_settings(), charset="utf8mb4", cursorclass=DictCursor, autocommit=False,
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


@contextmanager
def transaction():
    """One short transaction on its own connection: commit on success, roll back on any error, always close.

    If the connection breaks during COMMIT, the outcome is unknown: the error propagates and the
    caller must look the job up by id before doing anything again (never assume a rollback).
    """
    conn = connect()
    try:
        with conn.cursor() as cur:
            yield cur
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except pymysql.MySQLError:
            pass  # the original error matters more than a failed rollback on a broken link
        raise
    finally:
        conn.close()


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


def submit_snapshot(product_ids: list[int]) -> str:
    """Create a queued job (payload = the products at this moment) and its unsent outbox event.

    Both rows are written on one connection, in one transaction: they commit together or not at
    all.  The job goes first because the outbox's foreign key is checked at once.  Nothing is sent
    to the broker here — publisher.py does that after the commit, outside any transaction.
    """
    job_id = str(uuid4())
    with transaction() as cur:
        rows = read_snapshot(cur, product_ids)  # invalid input raises here: nothing inserted
        cur.execute(
            "INSERT INTO export_jobs (id, payload, deadline_at) "
            "VALUES (%s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (job_id, json.dumps(rows, ensure_ascii=False), DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the job insert did not create exactly one row")
        # Any exception from here on leaves the with-block and rolls the job row back too.
        cur.execute("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)", (str(uuid4()), job_id))
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
        # Lesson 12: FOR UPDATE, no longer lesson 11's SKIP LOCKED.  The publisher's confirm (UPDATE …
        # SET sent_at) re-checks the outbox's foreign key and holds this job row for a moment while the
        # message is already out; skipping would read that moment as "not claimable" and leave the job
        # queued with its event marked sent.  So wait (at most innodb_lock_wait_timeout, 1 s), then judge
        # the conditions on the latest row (lesson 13's guide tells how the benchmark found this).
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
