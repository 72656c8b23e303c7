"""The kit's own view of a lesson's database, for verifiers: the URL from the work dir's .env.tasks
(the slot's schema), a UTC session, dict rows.  Never printed.

`sql()` keeps one connection per thread (a forked child opens its own), pinged before each use, so a server
restarted by a drill is reconnected to; a link that breaks mid-statement is dropped, the error raised.  Every
statement autocommits: it sees the latest commits of the code under test.  `kit_db()`: a connection of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit
from uuid import uuid4

from shared.events import short
from shared.scripts import run_script
from shared.settings import WORK, setting
from shared.i18n import t
from shared.proc import WaitTimeout, wait_until

_local = threading.local()
TERMINAL = ("succeeded", "failed", "cancelled")  # an export job's final statuses
UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # a job or event id, as a script prints it


def db_settings() -> dict:
    url = setting("DATABASE_URL")
    assert url, t("DATABASE_URL is missing (the checker writes .env.tasks into the work dir)")
    parts = urlsplit(url)
    from shared.services_clients import is_loopback
    return {"host": parts.hostname, "port": parts.port or 3306, "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""), "database": unquote(parts.path.lstrip("/")),
            "ssl_disabled": is_loopback(parts.hostname) or None}  # see services_clients.is_loopback


SLOT_DATABASE = object()  # connect()'s default: the database of this run's slot


def connect(autocommit: bool = True, database=SLOT_DATABASE, io_timeout: float = 10):
    """A new connection of the kit's own (the caller closes it), in UTC: to the slot's database, or to
    `database` on the same server (None: no database); a read or write waits at most io_timeout s."""
    import pymysql
    from pymysql.cursors import DictCursor
    settings = db_settings() if database is SLOT_DATABASE else dict(db_settings(), database=database)
    return pymysql.connect(**settings, charset="utf8mb4", cursorclass=DictCursor, autocommit=autocommit,
                           connect_timeout=3, read_timeout=io_timeout, write_timeout=io_timeout,
                           init_command="SET time_zone = '+00:00'")


def _kept_connection():
    conn = getattr(_local, "conn", None)
    if conn is not None and getattr(_local, "pid", None) == os.getpid():
        try:
            conn.ping(reconnect=True)  # init_command runs again on a reconnect: still UTC
            return conn
        except Exception:  # noqa: BLE001 - the server went away: open a new one below
            close_kit_connection()
    _local.conn, _local.pid = connect(), os.getpid()
    return _local.conn


@contextlib.contextmanager
def kit_db(autocommit: bool = True):
    """A cursor on a new connection of its own, closed at the end of the block: for anything that
    holds session state (a transaction, GET_LOCK, a SET) and must not outlive the block."""
    conn = connect(autocommit)
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


@contextlib.contextmanager
def kept_db():
    """A cursor on this thread's kept kit connection: for single statements (see sql)."""
    import pymysql
    conn = _kept_connection()
    try:
        with conn.cursor() as cur:
            yield cur
    except pymysql.OperationalError:
        close_kit_connection()  # a broken link: the next call opens a new one
        raise


def close_kit_connection() -> None:
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None and getattr(_local, "pid", None) == os.getpid():
        with contextlib.suppress(Exception):
            conn.close()


def sql(query: str, args=()) -> list[dict]:
    """One autocommitted statement on the kept connection; its rows."""
    with kept_db() as cur:
        cur.execute(query, args)
        return list(cur.fetchall())


def changed_rows(query: str, args=()) -> int:
    """One autocommitted statement (an UPDATE, say) on a connection of its own; how many rows it changed."""
    with kit_db() as cur:
        return cur.execute(query, args)


# ---------------------------------------------------------------- export_jobs, as the kit sees it

def job_row(job_id: str) -> dict | None:
    """Every column of the job (which columns exist depends on the lesson) plus the server's NOW(6)."""
    rows = sql("SELECT *, NOW(6) AS now FROM export_jobs WHERE id=%s", (job_id,))
    return rows[0] if rows else None


def wait_status(job_id: str, statuses: tuple[str, ...], seconds: float = 20, interval: float = 0.05,
                late=None) -> dict:
    """Poll the job's row until its status is one of `statuses`; a failed check that says where it is (or
    `late(row)`, a lesson's own words, given the row as it is then)."""
    def reached():
        row = job_row(job_id)
        return row if row and row["status"] in statuses else None
    try:
        return wait_until(reached, seconds, f"job {job_id} to reach {statuses}", interval=interval)
    except WaitTimeout:
        row = job_row(job_id)
        if late is not None:
            raise AssertionError(late(row)) from None
        now = f"{row and row['status']}, attempts={row and row.get('attempts')}"
        raise AssertionError(t("job {job_id} did not reach {statuses} within {seconds:g}s (now: {now})", now=now,
                               job_id=short(job_id), statuses='/'.join(statuses), seconds=seconds)) from None


# ---------------------------------------------------------------- rows and files, as the checks read them

def payload_of(row: dict):
    """A job's payload column as Python: a JSON column may come back as text (MySQL) or already decoded."""
    value = row["payload"]
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def server_now():
    """The server's clock (NOW(6)), the one the lesson's SQL compares with."""
    return sql("SELECT NOW(6) AS now")[0]["now"]


def seconds_until(job_id: str, column: str) -> float | None:
    """How far export_jobs.<column> of this job lies ahead of the server's clock, in seconds (negative: in the
    past; None: no such job, or the column is NULL)."""
    rows = sql(f"SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), {column}) AS us FROM export_jobs WHERE id=%s", (job_id,))
    us = rows[0]["us"] if rows else None
    return None if us is None else us / 1e6


def expire_lease(job_id: str, running_only: bool = False) -> None:
    """The job's lease moved into the past (time set by an UPDATE, never waited out); with `running_only`, only
    while the job is running."""
    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s"
        + (" AND status='running'" if running_only else ""), (job_id,))


def lease_token_of(job) -> str | None:
    """The lease token of what the learner's claim() returned (None: nothing claimed); a row without one fails."""
    if job is None:
        return None
    assert isinstance(job, dict) and job.get("lease_token"), t(
        "claim must return a row with lease_token or None, got {job!r}", job=job)[:200]
    return str(job["lease_token"])


def active_jobs() -> int:
    """How many jobs are still queued or running: what an admission limit or a drain counts."""
    return int(sql("SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')")[0]["n"])


def fill_admission(limit: int) -> list[str]:
    """The admission gate filled: kit rows (queued, no event, a deadline 10 minutes ahead) until `limit` jobs
    are queued or running; their ids, for remove_jobs."""
    fillers = [str(uuid4()) for _ in range(max(0, limit - active_jobs()))]
    with kit_db() as cur:
        cur.executemany("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                        "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(f,) for f in fillers])
    return fillers


def limit_default():
    """Run in a probe (shared/probe.py), next to the learner's modules: the default of state_store.admit_export's
    `limit` (None when it has none) — the capacity every path that calls admit_export(cur) uses."""
    import inspect

    import state_store
    try:
        param = inspect.signature(state_store.admit_export).parameters.get("limit")
    except (TypeError, ValueError):  # a callable whose signature cannot be read: no default to be found
        return None
    return None if param is None or param.default is param.empty else param.default


def job_event_counts() -> tuple[int, int]:
    """How many rows export_jobs and export_outbox hold now (one statement: both from the same moment)."""
    row = sql("SELECT (SELECT COUNT(*) FROM export_jobs) AS jobs, (SELECT COUNT(*) FROM export_outbox) AS events")[0]
    return int(row["jobs"]), int(row["events"])


def outbox_of(job_id: str, unsent_only: bool = False) -> list[dict]:
    """The job's outbox events (only those not sent yet, with `unsent_only`), oldest first, each with `live`
    (its claim still runs) and the server's `now`."""
    return sql("SELECT *, claim_until>NOW(6) AS live, NOW(6) AS now FROM export_outbox WHERE job_id=%s"
               + (" AND sent_at IS NULL" if unsent_only else "") + " ORDER BY created_at, id", (job_id,))


def event_sent(event_id: str) -> bool:
    """Whether this outbox event is sent (its sent_at set): what a publish-until-sent loop waits for."""
    rows = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event_id,))
    return bool(rows) and rows[0]["sent_at"] is not None


def publish_until_sent(c, event_id: str, failed: str, runs: int = 4, timeout: float = 25) -> str:
    """The outbox lessons' relay: `python publisher.py`, at most `runs` times, until the event is sent (event_sent);
    its last output line (cut to 200).  A run that fails notes its last 3 lines and fails with `failed`."""
    line = ""
    for _ in range(runs):
        done = run_script(["publisher.py"], timeout)
        line = done.lines[-1][:200] if done.lines else ""
        if done.code != 0:
            done.tail(c, 3)
        assert done.code == 0, failed
        if event_sent(event_id):
            return line
    raise AssertionError(t("event {event_id} still unsent after {runs} runs of python publisher.py (last output: "
                           "{line})", event_id=short(event_id), runs=runs, line=line))


def dead_letters(job_id: str, columns: str = "job_id, reason") -> list[dict]:
    """The job's rows in export_dead_letters (where lesson 15's scan quarantines a job that may not run again):
    these columns."""
    return sql(f"SELECT {columns} FROM export_dead_letters WHERE job_id=%s", (job_id,))


def first_product() -> int:
    """The lowest product id: a snapshot a check submits when any product will do."""
    rows = sql("SELECT MIN(id) AS id FROM products")
    assert rows and rows[0]["id"] is not None, t("the products table is empty")
    return int(rows[0]["id"])


def result_file(row: dict, missing: str | None = None) -> tuple[Path, object]:
    """A succeeded job's result file (result_ref: absolute, or relative to the work folder) and its JSON;
    `missing`: a lesson's own words for a result_ref that names no file."""
    ref = row.get("result_ref")
    assert ref, t("the job succeeded but result_ref is empty")
    path = Path(ref) if Path(ref).is_absolute() else WORK / ref
    assert path.is_file(), missing or t("result_ref points to no file: {ref}", ref=ref)
    return path, json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the kit's writes: cancels, time, leftovers

def request_cancel(job_id: str) -> int:
    """The cancel request exactly as lesson 15 writes it (schema_recovery.sql), while the job is queued or
    running; the rows it changed."""
    return changed_rows("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                        "WHERE id=%s AND status IN ('queued','running')", (job_id,))


def _of_jobs(column: str, job_ids) -> tuple[str, list]:
    """An SQL condition limiting a statement to these jobs ("": every job) and its arguments."""
    if job_ids is None:
        return "", []
    return f" AND {column} IN ({','.join(['%s'] * len(job_ids))})", list(job_ids)


def mark_sent(job_ids=None, seconds_ago: float = 0) -> None:
    """Unsent outbox events marked sent `seconds_ago`, their claims gone, and nothing sent to the broker: those
    of these jobs (None: of every job)."""
    where, args = _of_jobs("job_id", job_ids)
    sql(f"UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), claim_until=NULL "
        f"WHERE sent_at IS NULL{where}", [seconds_ago, *args])


@contextlib.contextmanager
def parked(keep: set[str]):
    """Other due events are pushed a day ahead for the block (put back after), so a publisher takes ours."""
    others = [r["id"] for r in sql("SELECT id FROM export_outbox WHERE sent_at IS NULL "
                                   "AND available_at<=DATE_ADD(NOW(6), INTERVAL 1 HOUR)") if r["id"] not in keep]
    move = "UPDATE export_outbox SET available_at={}(available_at, INTERVAL 1 DAY) WHERE id IN ({})"
    marks = ",".join(["%s"] * len(others))
    if others:
        sql(move.format("DATE_ADD", marks), others)
    try:
        yield
    finally:
        if others:
            sql(move.format("DATE_SUB", marks), others)


def dispatched_unclaimed(job_id: str, seconds_ago: float = 0, columns: tuple[str, ...] = ("last_dispatched_at",)):
    """"Marked sent, never sent": the publisher confirmed the job's unsent events `seconds_ago` but no message
    ever arrived; the job's `columns` (its last dispatch, ...) set to that moment too."""
    mark_sent([job_id], seconds_ago)
    set_ago("export_jobs", "id", [job_id], seconds_ago, *columns)


def close_open_jobs(job_ids, sets: str) -> None:
    """Leftover jobs taken out of every later path: their unsent events marked sent (mark_sent), and those still
    queued or running closed by `sets` (an SQL SET list: a final status, the lesson's own marks).  job_ids
    None: every job of the schema."""
    if job_ids is not None and not job_ids:
        return
    mark_sent(job_ids)
    where, args = _of_jobs("id", job_ids)
    sql(f"UPDATE export_jobs SET {sets} WHERE status IN ('queued','running'){where}", args)


def set_ago(table: str, key: str, refs, seconds: float, *columns: str) -> None:
    """Times set by UPDATE rather than waited for: `columns` of the rows of `table` whose `key` is one of `refs`
    set to `seconds` before the server's clock."""
    sets = ", ".join(f"{column}=DATE_SUB(NOW(6), INTERVAL %s SECOND)" for column in columns)
    sql(f"UPDATE {table} SET {sets} WHERE {key} IN ({','.join(['%s'] * len(refs))})",
        [seconds] * len(columns) + list(refs))


def move_back(table: str, key: str, refs, seconds: float, *columns: str) -> None:
    """Time passing for these rows only, done by UPDATE (never waited out): `columns` of the rows of `table`
    whose `key` is one of `refs` move `seconds` back (to the microsecond)."""
    us = int(round(seconds * 1e6))
    sets = ", ".join(f"{column}=DATE_SUB({column}, INTERVAL %s MICROSECOND)" for column in columns)
    sql(f"UPDATE {table} SET {sets} WHERE {key} IN ({','.join(['%s'] * len(refs))})",
        [us] * len(columns) + list(refs))


def row_lock_error(table: str, row_id: str) -> str | None:
    """None when the kit can lock this row at once (FOR UPDATE NOWAIT); the server's error ("code: text")
    when another transaction holds it."""
    import pymysql
    try:
        with kit_db(autocommit=False) as cur:
            cur.execute(f"SELECT id FROM {table} WHERE id=%s FOR UPDATE NOWAIT", (row_id,))
            cur.connection.rollback()
        return None
    except pymysql.MySQLError as exc:
        return f"{exc.args[0]}: {exc.args[1] if len(exc.args) > 1 else ''}"


MARIADB_NO_MAX_EXECUTION_TIME = 1193  # "Unknown system variable 'max_execution_time'": MariaDB has none


@contextlib.contextmanager
def explained(hint: str):
    """The one known server mismatch (the course's connect() sets max_execution_time, which MariaDB lacks)
    turned into `hint`, a pointer to the guide, instead of a bare traceback; any other error passes."""
    import pymysql
    try:
        yield
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == MARIADB_NO_MAX_EXECUTION_TIME and "max_execution_time" in str(exc):
            raise AssertionError(hint) from None
        raise


def remove_jobs(ids, tables: tuple[str, ...] = ()) -> None:
    """The kit's cleanup: jobs a check created, with their rows in `tables` (each keyed by job_id) first,
    in foreign-key order.  In parts, so no statement grows past the server's packet limit."""
    ids = sorted(set(ids))
    with kit_db() as cur:
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            marks = ",".join(["%s"] * len(part))
            for table in tables:
                cur.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", part)
            cur.execute(f"DELETE FROM export_jobs WHERE id IN ({marks})", part)

# ---------------------------------------------------------------- kit triggers: faults and gates

def make_marks_table(table: str) -> None:
    """A kit-owned table of (kind, ref) marks: a kit trigger fires only for the rows marked here."""
    sql(f"CREATE TABLE IF NOT EXISTS {table} (kind VARCHAR(16) NOT NULL, ref CHAR(36) CHARACTER SET ascii "
        "NOT NULL, PRIMARY KEY (kind, ref)) ENGINE=InnoDB")
    sql(f"DELETE FROM {table}")


@contextlib.contextmanager
def trigger(name: str, body: str, marks_table: str):
    """A kit trigger for the duration of the block; dropped, and its marks cleared, afterwards."""
    import pymysql
    sql(f"DROP TRIGGER IF EXISTS {name}")
    try:
        sql(body)
    except pymysql.MySQLError as exc:
        raise AssertionError(t("the checker cannot create its trigger (error {args}): the account needs the TRIGGER "
                               "privilege, and MySQL with binary logging on needs log_bin_trust_function_creators=1",
                               args=exc.args[0])) from None
    try:
        yield
    finally:
        sql(f"DROP TRIGGER IF EXISTS {name}")
        sql(f"DELETE FROM {marks_table}")


@contextlib.contextmanager
def marked_trigger(name: str, timing: str, table: str, marks_table: str, kind: str, action: str, when: str = "",
                   ref_of: str | None = None):
    """A kit trigger `name` ("BEFORE UPDATE" etc. ON `table`) for the block: it runs `action` (SQL statements,
    each ending in ;) for a row only if `when` holds (an SQL condition, "": always) and `marks_table` has a mark
    of `kind` (for the row's `ref_of`, e.g. "OLD.id", if given).  The caller puts the marks in."""
    match = f" AND ref={ref_of}" if ref_of else ""
    condition = f"{when} AND " if when else ""
    body = f"""CREATE TRIGGER {name} {timing} ON {table} FOR EACH ROW
               BEGIN
                 IF {condition}EXISTS (SELECT 1 FROM {marks_table} WHERE kind='{kind}'{match}) THEN
                   {action}
                 END IF;
               END"""
    with trigger(name, body, marks_table):
        yield


@contextlib.contextmanager
def fault_trigger(name: str, timing: str, table: str, marks_table: str, kind: str, ref: str, message: str,
                  when: str = "", ref_of: str | None = None):
    """A database fault for the block: the statement fails (SQLSTATE 45000, `message`) for the rows marked
    (kind, ref) — `ref_of` names the row's column to match ref against, none: every row; `when` narrows it
    (see marked_trigger).  Only this mark is in place; it is cleared afterwards, even if no trigger came."""
    make_marks_table(marks_table)
    sql(f"INSERT INTO {marks_table} (kind, ref) VALUES (%s, %s)", (kind, ref))
    try:
        with marked_trigger(name, timing, table, marks_table, kind,
                            f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{message}';", when, ref_of):
            yield
    finally:
        sql(f"DELETE FROM {marks_table}")


def gate_lock_name(prefix: str) -> str:
    """A GET_LOCK name for a kit gate: user locks are server-wide, so one per schema (slot)."""
    return f"{prefix}-gate-{db_settings()['database']}"


# ---------------------------------------------------------------- what a first claimer locks, and why

def held_by_others(table: str, ids: list[str]) -> int:
    """How many of these rows another transaction holds locked now: a SKIP LOCKED read by primary key
    takes all the others (and lets them go at once), exactly as a second claimer would find them."""
    free = 0
    with kit_db(autocommit=False) as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            free += cur.execute(f"SELECT id FROM {table} WHERE id IN ({','.join(['%s'] * len(part))}) "
                                "FOR UPDATE SKIP LOCKED", part)
        cur.connection.rollback()
    return len(ids) - free


def index_columns(table: str) -> dict[str, list[str]]:
    """The indexes of `table` in this schema: name -> its columns, in index order."""
    rows = sql("SELECT INDEX_NAME AS name, COLUMN_NAME AS col FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA=DATABASE() AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX", (table,))
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["name"], []).append(row["col"])
    return found


def plan_of(statement: str, table: str, alias: str | None = None) -> dict:
    """EXPLAIN of a SELECT the learner's code sent (EXPLAIN runs nothing): for the row of `table` (or its
    `alias`) the index used (key, "name (columns)", columns), whether it sorts (filesort), and one line."""
    import pymysql
    names = (table,) if alias is None else (table, alias)
    row: dict = {}
    if re.match(r"\s*SELECT\b", statement, re.I):
        with contextlib.suppress(pymysql.MySQLError), kit_db() as cur:
            cur.execute("EXPLAIN " + statement)  # no arguments: the statement is already complete
            rows = list(cur.fetchall())
            row = next((r for r in rows if r.get("table") in names), rows[0] if rows else {})
    key = row.get("key")
    columns = index_columns(table).get(key, []) if key else []
    return {"key": key, "index": f"{key} ({', '.join(columns)})" if key else None, "columns": columns,
            "filesort": "filesort" in (row.get("Extra") or ""),
            "line": (f"table={row.get('table')} type={row.get('type')} key={key or 'NULL'} rows={row.get('rows')} "
                     f"Extra: {row.get('Extra') or ''}") if row else t("(EXPLAIN gave nothing)")}


def one_line(statement: str, limit: int = 150) -> str:
    """A statement on one line (whitespace runs folded), cut to `limit` characters for a note."""
    text = " ".join(statement.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def lock_waits() -> list[str]:
    """Sessions of this schema waiting for a row lock (one read; innodb_trx is a cache, never polled)."""
    rows = sql("SELECT t.trx_mysql_thread_id AS thread, LEFT(t.trx_query, 120) AS query "
               "FROM information_schema.innodb_trx AS t JOIN information_schema.PROCESSLIST AS p "
               "ON p.ID=t.trx_mysql_thread_id WHERE t.trx_state='LOCK WAIT' AND p.DB=DATABASE()")
    return [f"thread {r['thread']}: {one_line(r['query'] or '', 80)}" for r in rows]
