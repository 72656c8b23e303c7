"""Lesson 16's monitor queries in a scratch schema, 16.7 (judge-side kit module, not a lesson file).

A database of its own beside the kit's (same server, same settings), created fresh and dropped at the end;
the folder's schema files loaded into it; known rows whose ages are set on the server's clock; the learner's
monitor_exports.sql run statement by statement, each result set found by a column it must have.  Ages are
judged within the bounds the server's clock allows, never by how fast the machine is.
"""

from __future__ import annotations

import contextlib
from uuid import uuid4

import pymysql

from shared.settings import WORK
from shared.i18n import t
from shared.lesson_db import connect, db_settings

SCHEMAS = ("schema_jobs.sql", "schema_outbox.sql", "schema_capacity.sql", "schema_schedule.sql", "schema_recovery.sql")


@contextlib.contextmanager
def scratch_schema():
    """A cursor on a fresh scratch database of the kit's server, dropped again at the end."""
    scratch = f"{db_settings()['database']}_m16"
    admin = connect(database=None, io_timeout=15)
    try:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
            cur.execute(f"CREATE DATABASE `{scratch}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        conn = connect(database=scratch, io_timeout=15)
        try:
            with conn.cursor() as cur:
                yield cur
        finally:
            conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
        admin.close()


def load_schemas(cur) -> None:
    """The folder's schema files, in lesson order: every statement but the SELECTs and SHOWs."""
    from shared.servicectl import split_sql
    for name in SCHEMAS:
        if (WORK / name).is_file():
            for statement in split_sql((WORK / name).read_text(encoding="utf-8")):
                if statement.lstrip().split(None, 1)[0].upper() not in ("SELECT", "SHOW"):
                    cur.execute(statement)


def insert_known_rows(cur) -> dict[str, str]:
    """The rows the monitor must count, their times set on the server's clock: name -> job id.  q_new: queued,
    its event unpublished for 42 s; q_sent: queued, dispatched 75 s ago with no pending event; running: a
    lease expired 5 s ago; failed: attempts exhausted, with its dead letter."""
    ids = {name: str(uuid4()) for name in ("q_new", "q_sent", "running", "failed")}
    ago = "DATE_SUB(NOW(6), INTERVAL {} SECOND)"
    day = "DATE_ADD(NOW(6), INTERVAL 1 DAY)"
    cur.execute(f"INSERT INTO export_jobs (id, status, payload, deadline_at, created_at) VALUES "
                f"(%s, 'queued', '[]', {day}, {ago.format(42)})", (ids["q_new"],))
    cur.execute(f"INSERT INTO export_outbox (id, job_id, created_at) VALUES (%s, %s, {ago.format(42)})",
                (str(uuid4()), ids["q_new"]))
    cur.execute(f"INSERT INTO export_jobs (id, status, payload, deadline_at, created_at, last_dispatched_at) "
                f"VALUES (%s, 'queued', '[]', {day}, {ago.format(120)}, {ago.format(75)})", (ids["q_sent"],))
    cur.execute(f"INSERT INTO export_outbox (id, job_id, created_at, sent_at) VALUES (%s, %s, "
                f"{ago.format(120)}, {ago.format(75)})", (str(uuid4()), ids["q_sent"]))
    cur.execute(f"INSERT INTO export_jobs (id, status, payload, attempts, lease_token, lease_until, deadline_at, "
                f"created_at) VALUES (%s, 'running', '[]', 1, %s, {ago.format(5)}, {day}, {ago.format(30)})",
                (ids["running"], str(uuid4())))
    cur.execute(f"INSERT INTO export_jobs (id, status, payload, attempts, deadline_at) VALUES "
                f"(%s, 'failed', '[]', 3, {day})", (ids["failed"],))
    cur.execute("INSERT INTO export_dead_letters (job_id, reason) VALUES (%s, 'attempts_exhausted')",
                (ids["failed"],))
    return ids


def waiting_since(cur, ids: dict[str, str]) -> tuple[list, list]:
    """When each known row started waiting, as stored (the monitor may read the job or its event): the
    unpublished job's times, the dispatched job's."""
    cur.execute("SELECT j.created_at AS job, o.created_at AS event FROM export_jobs AS j "
                "JOIN export_outbox AS o ON o.job_id=j.id WHERE j.id=%s", (ids["q_new"],))
    waiting = list(cur.fetchone().values())
    cur.execute("SELECT j.last_dispatched_at AS job, o.sent_at AS event FROM export_jobs AS j "
                "JOIN export_outbox AS o ON o.job_id=j.id WHERE j.id=%s", (ids["q_sent"],))
    dispatched = list(cur.fetchone().values())
    return waiting, dispatched


def server_now(cur):
    """The database server's clock (the monitor's ages are measured on it)."""
    cur.execute("SELECT NOW(6) AS now")
    return cur.fetchone()["now"]


def age_bounds(origins: list, before, after) -> tuple[float, float]:
    """The ages a query run between `before` and `after` (server clock) can report for rows that started
    waiting at `origins`: from the latest origin at `before` to the earliest at `after`.  A second of slack
    below lets whole-second arithmetic through; nothing depends on how fast the machine is."""
    low = (before - max(origins)).total_seconds() - 1
    high = (after - min(origins)).total_seconds() + 0.001
    return low, high


def run_monitor(cur, statements: list[str]) -> list[tuple[list[str], list[dict]]]:
    """Each statement of monitor_exports.sql in turn: (columns, rows) of every one that returns rows."""
    sets = []
    for statement in statements:
        try:
            cur.execute(statement)
        except pymysql.MySQLError as exc:
            first = statement.strip().splitlines()[0][:80]
            raise AssertionError(t("a monitor_exports.sql statement failed ({first}): {exc}", first=first,
                                   exc=exc)) from None
        if cur.description:
            sets.append(([d[0] for d in cur.description], list(cur.fetchall())))
    return sets


def pick(sets, column: str) -> list[dict]:
    """The rows of the first result set holding `column`."""
    for columns, rows in sets:
        if column in columns:
            return rows
    raise AssertionError(t("monitor_exports.sql returns no column {column}", column=column))


def number(value):
    """A DECIMAL or integer age as a float; NULL stays None."""
    return None if value is None else float(value)
