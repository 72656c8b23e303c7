"""Lesson 07's task-center judge, its side of the bridge (judge-side kit module, not a lesson file): the probe
where the taskcenter/ package runs (the steps of lab07_learner_taskcenter.py, asked one at a time), a worker or a
log capture around a block, the SQLite files read through the judge's own connection (never the learner's
store), 07.7's cancel in flight and 07.8's servers.  It never imports taskcenter, nor the probe module.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path

from lab07_loopback import HOLD_CAP, Loopback
from shared.i18n import t
from shared.logs import LOG_DIR
from shared.probe import Probe
from shared.proc import Process, wait_until

WORK = Path.cwd()
CALL_TIMEOUT = 30.0  # the worker's call timeout where no check means a call to time out
BOUND = 30.0  # backstop for waits that facts end in well under a second
SLACK = 15.0  # a probe call's timeout beyond the bound the probe itself keeps
TERMINAL = ("success", "failed", "canceled")
PROBE = "lab07_learner_taskcenter"
learner = Probe()  # taskcenter loads there, never in this process (the judge)
until = partial(wait_until, interval=0.01)  # the task center's steps take milliseconds: poll often


# ---------------------------------------------------------------- the probe's steps

def ask(step: str, *args, timeout: float = BOUND + SLACK, **kwargs):
    """One step in the probe (lab07_learner_taskcenter.STEP; "load" imports the package, so a broken module
    fails that check only).  What the learner's code raised there is raised here (shared/probe.LearnerRaised);
    an `ask` in a finally that raises again (or times out) keeps the first error as its context, and
    shared/tap prints both."""
    return learner.call(f"{PROBE}:{step}", *args, timeout=timeout, **kwargs)


@contextmanager
def working(store: int, close_down: bool = True, **options):
    """A worker of the probe's session `store` runs inside the block (its counts land in the dict yielded)."""
    seen: dict = {}
    ask("start_worker", store, **options)
    try:
        yield seen
    finally:
        seen.update(ask("stop_worker", store, close_down, timeout=BOUND + 2 * SLACK) or {})


@contextmanager
def captured(store: int):
    """The log records the package wrote inside the block (filled in at its end)."""
    records: list = []
    ask("capture_start", store)
    try:
        yield records
    finally:
        records.extend(ask("capture_take", store))


@contextmanager
def opened(name: str, *args, sessions: int = 1):
    """A fresh SQLite file and `sessions` probe sessions (stores) on it for the block: (path, store, ...)."""
    path = fresh_db(name)
    stores: list[int] = []
    try:
        stores.extend(ask("open_store", str(path), *args) for _ in range(sessions))
        yield (path, *stores)
    finally:
        for store in stores:
            ask("close_store", store, timeout=BOUND + 3 * SLACK)


def events_of(records, tid, event=None):
    """The log records of one task (of one event, when named)."""
    return [r for r in records if r.get("task_id") == tid and (event is None or r.get("event") == event)]


# ---------------------------------------------------------------- the SQLite files, read here

def fresh_db(name: str) -> Path:
    """A new SQLite file's path in the logs folder (any earlier one, and its WAL files, removed)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    path = LOG_DIR / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def query(db: Path, sql: str, args=()) -> list[sqlite3.Row]:
    """Rows read from the file itself (the judge's own connection, never the learner's store)."""
    with closing(sqlite3.connect(str(db), timeout=5)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, tuple(args)).fetchall()


def stored_tasks(db: Path, ids) -> dict[str, dict]:
    """id -> {state, attempt, result, error} as stored in the file."""
    ids = list(ids)
    marks = ",".join("?" * len(ids))
    rows = query(db, f"SELECT id, state, attempt, result, error FROM tasks WHERE id IN ({marks})", ids)
    return {row["id"]: {"state": row["state"], "attempt": row["attempt"], "error": row["error"],
                        "result": None if row["result"] is None else bytes(row["result"])} for row in rows}


def row_count(db: Path) -> int:
    return query(db, "SELECT COUNT(*) FROM tasks")[0][0]


def all_final(db: Path, ids) -> bool:
    ids = list(ids)
    found = stored_tasks(db, ids)
    return len(found) == len(set(ids)) and all(row["state"] in TERMINAL for row in found.values())


# ---------------------------------------------------------------- 07.7: a cancel in flight

def cancel_in_flight(lab: Loopback, store: int, db: Path, kind: str):
    """07.7 layer 3: a held call through the `kind` downstream ("async": httpx2.AsyncClient, "thread": a
    blocking client in a thread), canceled while the server holds it.  (the task as stored, what the server
    saw, cancel's seconds, the task's log events, for "thread" (what the server had then, times discarded))."""
    name = f"hold-{kind}"
    url = lab.script(name, ["hold"])
    with captured(store) as records:
        try:
            # The call timeout outlasts the hold: the held request ends only by the client hanging up
            # (cancel reached the socket) or by the server answering at its cap (cancel did not).
            with working(store, close_down=False, downstream="httpx" if kind == "async" else "thread",
                         max_threads=2, call_timeout=CALL_TIMEOUT):
                task = ask("submit", store, url, b"{}", f"cancel-{kind}", 3)
                until(lambda: lab.snapshot(name)["active"] == 1, BOUND, t("the downstream to get the call"))
                cancel = ask("cancel", store, task["id"])
                if kind == "async":
                    until(lambda: lab.snapshot(name)["outcomes"], HOLD_CAP + BOUND,
                          t("the request on the server to end"))
                    discarded = None
                else:
                    still = lab.snapshot(name)
                    lab.release(name)  # let the blocking request finish: nothing could stop it
                    count = ask("wait_discarded", store, 1, BOUND)
                    if count < 1:
                        what = t("the threaded request to end and be discarded")
                        raise AssertionError(t("waited {bound:g} s for {what}", bound=BOUND, what=what))
                    discarded = (still, count)
        finally:
            lab.release(name)
            ask("close_downstream", store, timeout=BOUND + 2 * SLACK)
    snap, stored = lab.snapshot(name), stored_tasks(db, [task["id"]])[task["id"]]
    assert cancel["task"]["state"] == "canceled", t("cancel returned {state}", state=cancel["task"]['state'])
    return stored, snap, cancel["seconds"], [r["event"] for r in events_of(records, task["id"])], discarded


# ---------------------------------------------------------------- 07.8: the servers

def serve(db: Path, port: int, stale_after: float, log_name: str) -> Process:
    """`python -m taskcenter.main serve` on `db`, started here and ready on `port` (its recovery done)."""
    log_path = LOG_DIR / log_name
    log_path.unlink(missing_ok=True)
    proc = Process([sys.executable, "-m", "taskcenter.main", "serve", "--db", str(db), "--port", str(port),
                    "--call-timeout", str(HOLD_CAP), "--stale-after", str(stale_after), "--poll-interval", "0.02",
                    "--stop-grace", "0.5"], cwd=WORK, log_path=log_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        proc.wait_ready(BOUND, port=port)  # uvicorn binds after the lifespan startup: recovery is done
    except BaseException:
        proc.stop()
        raise
    return proc
