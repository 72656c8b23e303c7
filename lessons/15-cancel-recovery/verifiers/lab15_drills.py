"""Lesson 15's drills (not a lesson file): times moved back so a delivery is overdue (15.4), a crowd of
overdue jobs, the lab15_tools.py helper processes that scan or publish on the checker's word and can stop
holding their first locks (15.4, 15.6), and what such a held scanner locked and why (15.4's known gap).
"""

from __future__ import annotations

import re
from uuid import uuid4

from shared import handshake
from shared.i18n import listed, t
from shared.lesson_db import dispatched_unclaimed, index_columns, kit_db, move_back, sql


# ---------------------------------------------------------------- times moved back, overdue jobs

def overdue(job_id: str, seconds_ago: int) -> None:
    """This job's event was sent (and confirmed) `seconds_ago`, and nobody ever claimed the job."""
    dispatched_unclaimed(job_id, seconds_ago, ("last_dispatched_at", "updated_at", "next_attempt_at"))


def time_passes(job_id: str, seconds: int) -> None:
    """As if `seconds` went by with nobody touching this job: all its recorded times move back."""
    move_back("export_jobs", "id", [job_id], seconds, "updated_at", "next_attempt_at", "last_dispatched_at",
              "created_at")
    move_back("export_outbox", "job_id", [job_id], seconds, "created_at", "available_at", "sent_at")


def add_overdue(n: int) -> list[str]:
    """n queued jobs, each dispatched 2 minutes ago and never claimed, in a known updated_at order."""
    jobs = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        cur.executemany(
            "INSERT INTO export_jobs (id, payload, deadline_at, created_at, updated_at, next_attempt_at, "
            "last_dispatched_at) VALUES (%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE), "
            "DATE_SUB(NOW(6), INTERVAL 3 MINUTE), "
            "DATE_ADD(DATE_SUB(NOW(6), INTERVAL 2 MINUTE), INTERVAL %s MICROSECOND), "
            "DATE_SUB(NOW(6), INTERVAL 2 MINUTE), DATE_SUB(NOW(6), INTERVAL 2 MINUTE))",
            [(j, k) for k, j in enumerate(jobs)])
        cur.executemany("INSERT INTO export_outbox (id, job_id, sent_at) VALUES "
                        "(%s, %s, DATE_SUB(NOW(6), INTERVAL 2 MINUTE))", [(str(uuid4()), j) for j in jobs])
    return jobs


def pending_counts(jobs: list[str]) -> dict[str, int]:
    counts = {j: 0 for j in jobs}
    for start in range(0, len(jobs), 500):
        part = jobs[start:start + 500]
        marks = ",".join(["%s"] * len(part))
        for row in sql(f"SELECT job_id, COUNT(*) AS n FROM export_outbox WHERE job_id IN ({marks}) "
                       f"AND sent_at IS NULL GROUP BY job_id", part):
            counts[row["job_id"]] = row["n"]
    return counts


# ---------------------------------------------------------------- lab15_tools.py helpers, each on the checker's go

def helpers(command: str, names: list[str]) -> handshake.HelperGroup:
    """lab15_tools.py processes (scan or publish), each running the learner's code when the checker says go."""
    return handshake.HelperGroup(["lab15_tools.py", command], names, f"lab15-{command}", command)


# ---------------------------------------------------------------- why a second scanner found everything locked

SCAN_INDEX = "KEY export_jobs_recovery_scan (status, updated_at, id)"


def all_locked_message(statement: str, plan: dict, locked: int, overdue: int) -> str:
    """Why scanner B recovered nothing, in one read: the rows A locked, the plan that did it, the fix."""
    seen = t("scanner B recovered nothing: while scanner A sat inside its batch transaction (LIMIT 50) it held "
             "{locked} of the {overdue} overdue jobs locked. ", locked=locked, overdue=overdue)
    if not plan["filesort"]:
        return seen + t("EXPLAIN of A's scan SELECT: {line}. A batch must lock only the rows it returns: add the "
                        "index (status, updated_at, id), pick it with FORCE INDEX and ORDER BY j.status, "
                        "j.updated_at, j.id (see this lesson's guide)", line=plan['line'])
    flat = " ".join(statement.split())
    forced = re.search(r"FORCE\s+INDEX", flat, re.I) is not None
    ordered = re.search(r"ORDER\s+BY\s+j\.status\s*,\s*j\.updated_at\s*,\s*j\.id\b", flat, re.I) is not None
    course = not forced and re.search(r"ORDER\s+BY\s+j\.updated_at\s*,\s*j\.id\b", flat, re.I) is not None
    has_index = ["status", "updated_at", "id"] in index_columns("export_jobs").values()
    how = (t("It reads through {index}", index=plan['index']) if plan["key"]
           else t("It reads the whole table"))
    steps = []
    if not has_index:
        steps.append(t("in schema_recovery.sql's ALTER TABLE export_jobs add the line ADD {index} (on the table you "
                       "already have: ALTER TABLE export_jobs ADD {index};)", index=SCAN_INDEX))
    if not forced:
        steps.append(t("in recovery.py write FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)"))
    if not ordered:
        steps.append(t("write ORDER BY j.status, j.updated_at, j.id"))
    numbered = [t("({k}) {step}", k=k, step=step) for k, step in enumerate(steps, 1)]
    cause = t("The cause is the course's scan, not your typing. ") if course else t("The cause is the scan's index. ")
    return seen + cause + t(
        "EXPLAIN of A's SELECT … FOR UPDATE SKIP LOCKED: {line}. {how}. Using filesort: the WHERE allows two statuses "
        "and no index hands out the candidates in the ORDER BY, so the server reads and sorts every candidate before "
        "LIMIT 50, and FOR UPDATE locks every row it read. Fix (the index, FORCE INDEX and the ORDER BY work only "
        "together): {steps} (this lesson's guide: 'Making SKIP LOCKED really skip')", line=plan['line'], how=how,
        steps=listed(numbered, semicolons=True))
