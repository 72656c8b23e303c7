"""Event files: one JSON line per event, appended by many processes at once (a learner's Celery worker and
its pool children, a lesson's claimers, worker wrappers inside workers) and read back as facts -- who ran what,
in which order, how it ended.  shared/worker_events.py writes a worker's task runs this way.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def append_event(path: str | Path, kind: str, /, **fields) -> None:
    """One JSON line (kind, pid, time, fields) appended with a single write: the worker's pool children
    append to the same file at once, and O_APPEND keeps every line whole."""
    line = json.dumps({"kind": kind, "pid": os.getpid(), "at": time.time(), **fields}, default=repr)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_events(path: str | Path, /, **match) -> list[dict]:
    """Every whole JSON line of an event file written by append_event (only those whose fields equal `match`).
    A line still being written by another process (or cut short by a SIGKILL) is skipped, never a crash."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if matches(event, match):
            found.append(event)
    return found


def matches(event, fields: dict) -> bool:
    """An event (a dict) whose fields equal these."""
    return isinstance(event, dict) and all(event.get(k) == v for k, v in fields.items())


def job_events(source, job_id: str, /, kind: str = "start", **match) -> list[dict]:
    """One job's events of `kind` (a task's starts, by default) in file order: those whose first task argument is
    job_id and whose fields equal `match`.  `source`: an event file (read_events) or events already read."""
    events = read_events(source) if isinstance(source, (str, Path)) else source
    return [e for e in events if matches(e, {"kind": kind, **match}) and (e.get("args") or [None])[0] == job_id]


def task_runs(events: list[dict], starts: list[dict] | None = None) -> list[tuple[dict, dict | None]]:
    """Task runs in file order, each (its start, its end or None: still running, or killed); `starts`: some
    of the events' starts (all of them when None).  One process writes a run's start before its end, so the
    k-th start of a (message id, pid) pair ends with the k-th end of that pair: a message delivered again, to
    the same process or another, is a run of its own."""
    ends: dict[tuple, list[dict]] = {}
    for event in events:
        if event.get("kind") == "end":
            ends.setdefault((event.get("task_id"), event.get("pid")), []).append(event)
    chosen = None if starts is None else {id(start) for start in starts}
    runs, begun = [], {}
    for event in events:
        if event.get("kind") != "start":
            continue
        key = (event.get("task_id"), event.get("pid"))
        k = begun[key] = begun.get(key, -1) + 1
        if chosen is None or id(event) in chosen:
            mine = ends.get(key, [])
            runs.append((event, mine[k] if k < len(mine) else None))
    return runs


def job_runs(source, job_id: str, /, **match) -> list[tuple[dict, dict | None]]:
    """One job's task runs (task_runs), its starts chosen as job_events chooses them."""
    events = read_events(source) if isinstance(source, (str, Path)) else source
    return task_runs(events, job_events(events, job_id, **match))


def short(value) -> str:
    """The first 8 characters of an id, for messages."""
    return f"{str(value)[:8]}…"
