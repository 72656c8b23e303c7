"""Lesson 14's lab as its checks use it (not a lesson file): the kit's own view of the database and the cleanup
of a check's rows, the learner's modules (loaded in the probe, lab14_learner.py) and what one of their calls
did, the kit's clock for schedule_tick (14.4), the time-zone processes (14.3), the admission gate (14.7, 14.8).
Facts and fixtures: nothing here decides a check.
"""

from __future__ import annotations

import contextlib
import datetime as dtmod
import os
import re
import sys
from pathlib import Path
from uuid import uuid4

from shared import probe_report
from shared.lesson_celery import spawn
from shared.logs import LOG_DIR
from shared.events import short
from shared.scripts import run_script
from shared.settings import WORK, redact
from shared.i18n import t
from shared import lesson_db
from shared.lesson_db import UUID_RE, db_settings, kit_db, sql
from shared.probe import Probe
from shared.proc import Process

UTC = dtmod.timezone.utc
UUID = re.compile(f"^{UUID_RE}$")


# ---------------------------------------------------------------- the kit's own view of the database

def counts() -> dict:
    row = sql("SELECT (SELECT COUNT(*) FROM export_jobs) AS jobs, (SELECT COUNT(*) FROM export_outbox) AS events, "
              "(SELECT COUNT(*) FROM export_schedule_slots) AS slots")[0]
    return {k: int(v) for k, v in row.items()}


def job_ids() -> set[str]:
    return {r["id"] for r in sql("SELECT id FROM export_jobs")}


def slot_keys() -> set[str]:
    return {r["slot_key"] for r in sql("SELECT slot_key FROM export_schedule_slots")}


def slot_of(key: str) -> dict | None:
    rows = sql("SELECT slot_key, job_id FROM export_schedule_slots WHERE slot_key=%s", (key,))
    return rows[0] if rows else None


def slots_of_job(job_id: str) -> list[str]:
    return [r["slot_key"] for r in sql("SELECT slot_key FROM export_schedule_slots WHERE job_id=%s", (job_id,))]


def remove_jobs(ids) -> None:
    """The kit's cleanup: the rows a check created (slots, events, jobs), in foreign-key order."""
    lesson_db.remove_jobs(ids, tables=("export_schedule_slots", "export_outbox"))


@contextlib.contextmanager
def own_rows():
    """Whatever jobs appear while the block runs are this check's: removed afterwards, pass or fail."""
    before = job_ids()
    try:
        yield before
    finally:
        remove_jobs(job_ids() - before)


def script_lines(c, script: str, timeout: float, shown: int, failed: str) -> list[str]:
    """`python SCRIPT`'s non-empty output lines, secrets masked.  When it fails, its last `shown` lines are noted
    and the check fails with `failed`."""
    done = run_script([script], timeout)
    if done.code != 0:
        done.tail(c, shown)
    assert done.code == 0, failed
    return done.lines


# ---------------------------------------------------------------- the learner's modules (in the probe)

learner = Probe()  # the learner's modules load there, never in this process (the judge)


def celery_app():
    return learner.module("celery_app")


def schedule_store():
    return learner.module("schedule_store", "schedule_once")


def schedule_tasks():
    return learner.module("schedule_tasks", "execution_slot", "schedule_tick")


def state_store():
    return learner.module("state_store", "transaction", "admit_export", "lock_admission")


class Raised(Exception):
    """What a learner call raised, as lab14_learner.py reported it (its class name, message, asked-about kinds)."""

    def __init__(self, seen: dict):
        super().__init__(str(seen.get("text", "")))
        self.type_name = str(seen.get("type", "Exception"))
        self.kinds = {str(k) for k in seen.get("is") or ()}

    def is_a(self, name: str) -> bool:
        return name in self.kinds


def outcome(call) -> tuple[str, object]:
    """("value", v) or ("error", exception): what one call of the learner's code did (in the probe; its
    exception rebuilt here)."""
    try:
        return "value", call()
    except Exception as exc:  # noqa: BLE001 - the check decides what was expected
        return "error", exc


def outcome_of(seen: dict) -> tuple[str, object]:
    """The same for an outcome lab14_learner.py reported."""
    if "raised" in seen:
        return "error", Raised(seen["raised"])
    return "value", seen.get("value")


def describe(kind: str, value) -> str:
    if kind == "error":
        name = value.type_name if isinstance(value, Raised) else type(value).__name__
        return f"{name}: {redact(str(value))[:160]}"
    return "None" if value is None else (short(value) if isinstance(value, str) and UUID.match(value) else repr(value))


# ---------------------------------------------------------------- the kit's clock (14.4)

def ticks_at(runs: list[dtmod.datetime]) -> list[tuple[str, object]]:
    """schedule_tick() once at each moment, in the probe with schedule_tasks' `datetime` pointed at the kit's
    clock meanwhile (lab14_learner.ticks_at): what each run did."""
    seen = learner.call("lab14_learner:ticks_at", runs)
    if seen.get("clock") is False:
        raise AssertionError(t("schedule_tasks does not read the time through datetime.now(timezone.utc) (the "
                               "checker cannot set its clock)"))
    return [outcome_of(run) for run in seen["runs"]]


def far_day() -> dtmod.datetime:
    """10:00 UTC on a day far from today and from other runs: no real tick can share its slots."""
    n = uuid4().int
    return dtmod.datetime(2040 + n % 50, 1 + (n >> 8) % 12, 1 + (n >> 16) % 28, 10, 0, tzinfo=UTC)


# ---------------------------------------------------------------- the time-zone processes (14.3)

def zone_run(tz: str) -> tuple[Process, Path]:
    """lab14_zones.py started under TZ=tz, and where it will report (shared/probe_report.py)."""
    name = f"lab14-zones-{tz.replace('+', 'p').replace('-', 'm')}"
    report = probe_report.fresh_path(LOG_DIR, name)
    # POSIX TZ strings need no tz database: "LAB-8" is UTC+8, "LAB+5" is UTC-5.
    proc = spawn([sys.executable, str(WORK / "lab14_zones.py")], f"{name}.log",
                 dict(os.environ, TZ=tz, **{probe_report.REPORT_ENV: str(report)}))
    return proc, report


# ---------------------------------------------------------------- the admission gate (14.7, 14.8)

def admission_limit() -> int:
    """The limit admit_export uses when called as admit_export(cur): its default value (read in the probe)."""
    default = learner.call("shared.lesson_db:limit_default")
    if type(default) is int and default > 0:
        return default
    return 100


def at_capacity(slot_key: str, product: int) -> tuple[str, object]:
    """schedule_once in the probe; an error it raised says whether it is a state_store.CapacityExceeded."""
    return outcome_of(learner.call("lab14_learner:schedule_once_at_capacity", slot_key, [product]))


@contextlib.contextmanager
def hold_gate():
    """LOCK TABLES export_admission_gate READ: whoever wants to lock the gate row queues up at the table's
    metadata lock until the kit unlocks (the racers' sessions may wait that long: lab14_racer.py)."""
    with kit_db() as cur:
        cur.execute("LOCK TABLES export_admission_gate READ")
        try:
            yield
        finally:
            cur.execute("UNLOCK TABLES")


def waiting_at_gate() -> int:
    database = db_settings()["database"]
    with kit_db() as cur:
        cur.execute("SHOW FULL PROCESSLIST")
        return sum(1 for row in cur.fetchall()
                   if row.get("db") == database and "metadata lock" in (row.get("State") or ""))
