"""Lesson 13's timeline figures (not a lesson file; pictures, never a verdict): 13.1's queued+running
against the limit, on the database's clock, and 13.5's lanes of the fast and bulk workers, from the probe's
starts and ends.
"""

from __future__ import annotations

import time
from datetime import datetime

from lab13_fixture import recorded

from shared.figures import bar, lane, lanes, mark, steps
from shared.i18n import t
from shared.events import job_runs
from shared.lesson_db import server_now, sql


def admission_steps(since: datetime, limit: int) -> dict:
    """queued+running over time, counted over the rows created since `since` (the server's clock): +1 at a
    row's created_at, -1 at the updated_at of a row that has left queued/running (the kit's reset sets it)."""
    rows = sql("SELECT status, created_at, updated_at FROM export_jobs WHERE created_at >= %s", (since,))
    changes = [((r["created_at"] - since).total_seconds(), 1) for r in rows]
    changes += [((r["updated_at"] - since).total_seconds(), -1) for r in rows
                if r["status"] not in ("queued", "running") and r["updated_at"] >= r["created_at"]]
    changes.sort()  # at one instant the -1 of a reset comes before the +1 of a new row
    points, count = [(0.0, 0)], 0
    for at, step in changes:
        count += step
        points.append((at, count))
    points.append(((server_now() - since).total_seconds(), count))
    return steps(t("queued + running against the limit (the rows placed first, then the jobs this check submitted)"),
                 points, limit=limit, label="queued+running",
                 caption=t("the database's clock; every row made since this check began (the places filled first, "
                           "then the concurrent submits) +1 at its created_at, -1 when it left queued/running (its "
                           "updated_at); the dashed line is the limit {limit}, the axis starts just below it",
                           limit=limit))


def isolation_lanes(bulk_jobs: list[str], fast: str | None, moments: dict) -> dict:
    """13.5: a lane per worker (by the node and queue the probe recorded), a bar per execution from its
    start to its end (or to now, still running); jobs no worker started wait in their own lane."""
    seen, now = recorded(), time.time()
    jobs = [(job, "bulk", t("long job, {n} rows", n=n)) for job, n in zip(bulk_jobs, (40, 50), strict=False)]
    if fast:
        jobs.append((fast, "fast", t("short job, 1 row")))
    rows: dict[str, dict] = {}
    for job, kind, label in jobs:
        runs = job_runs(seen, job)
        holds = [e["at"] for e in seen if e.get("kind") == "hold" and e.get("job") == job]
        for start, end in runs:
            name = f"{str(start.get('node')).split('@')[0]}@ ← {start.get('queue')}"
            row = rows.setdefault(name, lane(name))
            row["bars"].append(bar(start["at"], end["at"] if end else now,
                                   label if end else label + t(" (still running)"), kind))
            row["marks"] += [mark(at, t("held while writing"), "hold") for at in holds]
            if kind == "bulk" and job in moments:
                row["marks"].append(mark(moments[job], t("submitted"), "queued"))
        if not runs and job in moments:
            row = rows.setdefault(t("not started yet"), lane(t("not started yet")))
            row["bars"].append(bar(moments[job], now, label + t(" (queued)"), "queued"))
    order = sorted(rows, key=lambda n: (not n.startswith("fast@"), not n.startswith("bulk@"), n))
    return lanes(t("a short job on the fast queue while the bulk worker is busy"), [rows[n] for n in order],
                 lines=[mark(moments["fast"], t("short job submitted"), "event")] if "fast" in moments else [],
                 caption=t("starts and ends as each worker recorded them (wall clock); an execution with no end yet "
                           "is drawn to the moment of drawing"))
