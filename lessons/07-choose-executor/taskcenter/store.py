"""SQLite is the single source of truth: every state change is a committed row update.

The methods are plain blocking calls.  Async code awaits them through Store.call, which
runs them on the store's own single thread: the event loop never waits on the disk, and
one thread per connection means no crowd of threads queueing for it.  A lock still guards
the connection, so direct calls from other threads (tests, scripts) stay safe.

Every write runs inside BEGIN IMMEDIATE: the write lock is taken *before* reading, so
"read pending, then update" cannot interleave with another connection doing the same
(two Stores on one file never claim the same task).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from .models import TERMINAL, State, Task, transit

# The only copy of the schema.  state is text (readable in the sqlite3 shell);
# the UNIQUE idempotency_key is what makes two concurrent submits of one key
# produce one row: the second INSERT fails and we return the first row instead.
SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id               TEXT PRIMARY KEY,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'running', 'success', 'failed', 'canceled')),
    url              TEXT NOT NULL,
    body             BLOB NOT NULL,
    idempotency_key  TEXT NOT NULL UNIQUE,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    not_before       REAL NOT NULL,
    result           BLOB,
    error            TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    started_at       REAL,
    finished_at      REAL
);
-- claim_one's WHERE and ORDER BY in index order: the next task is found without sorting the queue.
CREATE INDEX IF NOT EXISTS idx_tasks_claim ON tasks(state, not_before, created_at);
"""


class IdempotencyConflict(Exception):
    """The key belongs to a task that already finished: refuse instead of running it twice."""

    def __init__(self, task: Task) -> None:
        super().__init__(f"idempotency key {task.idempotency_key!r} already finished as {task.state.value}")
        self.task = task


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (or create) the database in WAL mode and make sure the schema exists."""
    conn = sqlite3.connect(str(path), timeout=5.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal" and str(path) != ":memory:":
        conn.close()
        raise RuntimeError(f"{path}: SQLite refused WAL mode (got {mode!r}); is it on a network share?")
    # In WAL mode NORMAL still survives a killed process; only a power cut can lose the last commits.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    return conn


def _task(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"], state=State(row["state"]), url=row["url"], body=bytes(row["body"]),
        idempotency_key=row["idempotency_key"], attempt=row["attempt"], max_attempts=row["max_attempts"],
        not_before=row["not_before"], result=None if row["result"] is None else bytes(row["result"]),
        error=row["error"], created_at=row["created_at"], updated_at=row["updated_at"],
        started_at=row["started_at"], finished_at=row["finished_at"],
    )


class Store:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")

    @classmethod
    def open(cls, path: str | Path) -> Store:
        return cls(connect(path))

    async def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Await one of this store's methods on its own thread, e.g. await store.call(store.get, tid)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, partial(method, *args, **kwargs))

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        with self._lock:
            self._c.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: the whole block commits, or none of it does."""
        with self._lock:
            self._c.execute("BEGIN IMMEDIATE")
            try:
                yield self._c
            except BaseException:
                self._c.execute("ROLLBACK")
                raise
            self._c.execute("COMMIT")

    def _row(self, conn: sqlite3.Connection, tid: str) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM tasks WHERE id = ?", (tid,)).fetchone()
        if row is None:
            raise KeyError(tid)
        return row

    # ------------------------------------------------------------------ reads

    def get(self, tid: str) -> Task:
        """The task with this id; KeyError if there is none."""
        with self._lock:
            return _task(self._row(self._c, tid))

    def find_by_key(self, idempotency_key: str) -> Task | None:
        with self._lock:
            row = self._c.execute("SELECT * FROM tasks WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
        return None if row is None else _task(row)

    def count(self, state: State | None = None) -> int:
        with self._lock:
            if state is None:
                return self._c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
            return self._c.execute("SELECT COUNT(*) FROM tasks WHERE state = ?", (state.value,)).fetchone()[0]

    # ------------------------------------------------------------------ writes

    def submit(self, url: str, body: bytes, idempotency_key: str, max_attempts: int = 3) -> Task:
        """Register a task.  A live task with the same key is returned as is (no second row);
        a finished one makes this raise IdempotencyConflict."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        now = time.time()
        tid = uuid.uuid4().hex
        try:
            with self._write() as conn:
                conn.execute(
                    """INSERT INTO tasks (id, state, url, body, idempotency_key, attempt, max_attempts,
                                          not_before, created_at, updated_at)
                       VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)""",
                    (tid, State.PENDING.value, url, body, idempotency_key, max_attempts, now, now, now),
                )
        except sqlite3.IntegrityError:
            existing = self.find_by_key(idempotency_key)
            if existing is None:  # some other constraint failed: not ours to hide
                raise
            if existing.terminal:
                raise IdempotencyConflict(existing) from None
            return existing
        return self.get(tid)

    def claim_one(self, now: float | None = None) -> Task | None:
        """Move the oldest due pending task to running and count the attempt; None if none is due."""
        now = time.time() if now is None else now
        with self._write() as conn:
            row = conn.execute(
                """SELECT id FROM tasks WHERE state = ? AND not_before <= ?
                   ORDER BY not_before, created_at LIMIT 1""",
                (State.PENDING.value, now),
            ).fetchone()
            if row is None:
                return None
            # The write lock is ours since BEGIN IMMEDIATE, so the row is still pending here;
            # the state condition just keeps the statement honest on its own.
            conn.execute(
                """UPDATE tasks SET state = ?, attempt = attempt + 1, started_at = ?, updated_at = ?
                   WHERE id = ? AND state = ?""",
                (State.RUNNING.value, now, now, row["id"], State.PENDING.value),
            )
            return _task(self._row(conn, row["id"]))

    def mark(self, tid: str, dst: State, *, result: bytes | None = None, error: str | None = None,
             not_before: float | None = None) -> Task:
        """Move a task to dst, checked against the state machine inside the transaction.
        Raises KeyError (no such task) or IllegalTransition (e.g. it was canceled meanwhile)."""
        with self._write() as conn:
            src = State(self._row(conn, tid)["state"])
            transit(src, dst)
            now = time.time()
            conn.execute(
                """UPDATE tasks SET state = ?, result = ?, error = ?, updated_at = ?,
                       not_before = COALESCE(?, not_before), finished_at = ?
                   WHERE id = ?""",
                (dst.value, result, error, now, not_before, now if dst in TERMINAL else None, tid),
            )
            return _task(self._row(conn, tid))

    def requeue(self, tid: str, reason: str) -> State | None:
        """Give back a task we interrupted ourselves (graceful stop).  Returns its new state,
        or None if it was no longer running (it finished or was canceled meanwhile)."""
        with self._write() as conn:
            row = conn.execute("SELECT * FROM tasks WHERE id = ? AND state = ?",
                               (tid, State.RUNNING.value)).fetchone()
            if row is None:
                return None
            return self._give_back(conn, row, reason, time.time())

    def recover_stale_running(self, older_than_s: float = 600.0, now: float | None = None) -> dict[str, State]:
        """After a crash: tasks left running for more than older_than_s go back to pending.
        Returns {task id: its new state}."""
        now = time.time() if now is None else now
        with self._write() as conn:
            rows = conn.execute(
                "SELECT * FROM tasks WHERE state = ? AND started_at <= ? ORDER BY started_at",
                (State.RUNNING.value, now - older_than_s),
            ).fetchall()
            return {row["id"]: self._give_back(conn, row, "recovered: stale running", now) for row in rows}

    def _give_back(self, conn: sqlite3.Connection, row: sqlite3.Row, reason: str, now: float) -> State:
        # The interrupted call still counts: max_attempts caps the calls we *start*, since we cannot
        # know whether the downstream saw this one.  A task that used its last attempt fails instead.
        if row["attempt"] < row["max_attempts"]:
            dst, error, finished = State.PENDING, reason, None
        else:
            dst, error, finished = State.FAILED, f"{reason}; no attempts left", now
        conn.execute(
            """UPDATE tasks SET state = ?, error = ?, not_before = ?, updated_at = ?, finished_at = ?
               WHERE id = ? AND state = ?""",
            (dst.value, error, now, now, finished, row["id"], State.RUNNING.value),
        )
        return dst
