"""Lesson 11's lab as its checks use it (not a lesson file): the kit's own view of the database, the
learner's modules, the workers, the probe's events, the database restart and the server's open transactions.
The checks judge by what these return; an assert here only stops a helper that cannot go on.
"""

from __future__ import annotations

import contextlib

import pymysql

from shared.lesson_celery import LearnerTask, declared_worker, start_worker
from shared.logs import LOG_DIR
from shared.events import read_events, short
from shared.hold_gate import HoldList
from shared.i18n import t
from shared.lesson_db import db_settings, kit_db, sql
from shared.probe import Probe
from shared.proc import Process, WaitTimeout, wait_until

GATE = HoldList(LOG_DIR, "lab11")  # lab11_worker's gate on the first file write, and its events


# ---------------------------------------------------------------- the kit's own view of the database

def job_count() -> int:
    return sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]


def products(ids: list[int]) -> list[dict]:
    marks = ",".join(["%s"] * len(ids))
    rows = sql(f"SELECT id, name, description, is_active, price_cents FROM products WHERE id IN ({marks}) "
               "ORDER BY id", ids)
    return [{**row, "is_active": bool(row["is_active"]), "price_cents": int(row["price_cents"])} for row in rows]


def same_rows(got: list, expected: list[dict]) -> bool:
    """The product rows, compared field by field (key order and extra fields do not matter)."""
    try:
        picked = sorted(({key: (bool(row[key]) if key == "is_active" else row[key]) for key in expected[0]}
                         for row in got), key=lambda row: row["id"])
    except (KeyError, TypeError, IndexError):
        return False
    return picked == expected


def mariadb_hint() -> str:
    """What to do when a course-typed connect() meets MariaDB (the guide's one allowed change)."""
    return t("the server is MariaDB, which has no max_execution_time: change that line in connect() to "
             "cur.execute(\"SET SESSION max_statement_time = 3\") (see this lesson's guide)")


# ---------------------------------------------------------------- the learner's modules

learner = Probe()  # the learner's modules load there, never in the judge
EXPORT = LearnerTask(learner, "export_tasks:export_products")


def store():
    return learner.module("state_store", "connect", "transaction", "decode_payload", "read_snapshot",
                          "submit_snapshot", "claim", "finish")


def export_task() -> LearnerTask:
    """The learner's export_products, loaded in the probe: .send([job_id]) sends through it (the message's id)."""
    EXPORT.load()
    return EXPORT


# ---------------------------------------------------------------- workers and their events

class Workers:
    """Once 11.1 has stopped the worker the runner declared (declared_worker()), an equivalent one we own."""

    own: Process | None = None

    def start_own(self) -> Process:
        self.own = start_worker(declared_worker().argv, "worker-restarted.log")
        return self.own

    def ensure(self) -> None:
        if not (self.own is not None and self.own.alive()) and not declared_worker().alive():
            self.start_own()

    def stop_all(self) -> None:
        if self.own is not None:
            self.own.stop(grace=10)


def event(kind: str, **fields) -> dict | None:
    """The first probe event of this kind with these fields, or None."""
    return next(iter(read_events(GATE.events, kind=kind, **fields)), None)


def wait_task_end(task_id: str, seconds: float = 20) -> dict:
    """The worker's record of this message's execution (probe event), once it has ended."""
    try:
        return wait_until(lambda: event("end", task_id=task_id), seconds, f"task {task_id} to end", interval=0.05)
    except WaitTimeout:
        raise AssertionError(t("the worker did not finish message {id} within {seconds:g}s (see the worker log)",
                               id=short(task_id), seconds=seconds)) from None


# ---------------------------------------------------------------- restarting the database server

def server_state() -> dict:
    with kit_db() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
        uptime = int(cur.fetchone()["Value"])
        cur.execute("SELECT VERSION() AS v")
        version = cur.fetchone()["v"]
    return {"uptime": uptime, "version": version}


def database_answers() -> bool:
    with contextlib.suppress(pymysql.MySQLError), kit_db() as cur:
        cur.execute("SELECT 1")
        return True
    return False


def restart_database() -> str:
    """Stop and start the lab's database server through shared.servicectl; return what shows it happened."""
    from shared import servicectl
    before, old_pid = server_state(), servicectl.MYSQL.pid()
    how = servicectl.stop_for_drill("mysql", restart=True)
    wait_until(database_answers, 60, "the database to answer again", interval=0.2)
    after = server_state()
    new_pid = servicectl.MYSQL.pid()
    assert after["uptime"] < before["uptime"] or (old_pid and new_pid and new_pid != old_pid), t(
        "the database server does not look restarted")
    return f"{how}, uptime {before['uptime']} s → {after['uptime']} s ({after['version']})"


# ---------------------------------------------------------------- transactions and row locks, as the server shows them

def other_transactions() -> list[dict]:
    """Open InnoDB transactions of the lesson's connections (same user and schema), ours excluded.

    information_schema.innodb_trx is a server-wide cache, refreshed only when nobody has read it for 0.1 s:
    one read may still show a transaction that committed a moment ago (the worker's claim).  So it is read
    until two reads 0.25 s apart name the same transactions; one that is really held stays in both."""
    previous: list | None = None

    def settled():
        nonlocal previous
        found = transactions_now()
        ids = sorted(str(row["trx_id"]) for row in found)
        agreed, previous = ids == previous, ids
        return (found,) if agreed else None
    return wait_until(settled, 10, "two reads of innodb_trx that agree", interval=0.25)[0]


def transactions_now() -> list[dict]:
    settings = db_settings()
    with kit_db() as cur:
        cur.execute("SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id AS thread, trx_rows_locked, "
                    "trx_query FROM information_schema.innodb_trx WHERE trx_mysql_thread_id <> CONNECTION_ID()")
        trx = list(cur.fetchall())
        cur.execute("SHOW FULL PROCESSLIST")
        threads = {row["Id"]: row for row in cur.fetchall()}
    return [row for row in trx if (thread := threads.get(row["thread"], {})).get("User") in (None, settings["user"])
            and thread.get("db") in (None, settings["database"])]
