"""A one-shot probe's report travels in a file of its own, never on the stdout it shares with learner code.

A probe that runs a learner's script used to print its report as one marked line.  That
line shares the stream with whatever the learner's code and its pool workers print, so a worker's traceback
written at the same moment could land in front of it and the report was "missing" — a verdict decided by
the scheduler.  Now the judge names a fresh file (REPORT_ENV) and reads it after the probe has ended:

    judge:  ran = run(["lab02_learner.py", "normal"], LOGS, "probe-normal", 30.0, WORK)
            ran.report, ran.code, ran.output          # its report (None: it left none), exit code, what it printed
    probe:  write(report)                             # last thing it does

Observations, never verdicts: the judge checks the report's shape and decides.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

REPORT_ENV = "TASKLAB_PROBE_REPORT"
REPORT_LIMIT = 4 * 1024 * 1024  # a report is a few kB; anything bigger is not one


def fresh_path(folder: Path, name: str) -> Path:
    """Where a probe run reports: an empty slot (an old report of the same name is removed first)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.report.json"
    path.unlink(missing_ok=True)
    return path


def write(report: dict, default=repr) -> None:
    """Probe side: write the report whole (a temporary file renamed into place), so the judge never reads half."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        raise SystemExit(f"{REPORT_ENV} is not set: this probe is started by a lesson's verifier")
    temporary = f"{path}.partial"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(json.dumps(report, default=default))  # default: how a value JSON cannot carry is written
    os.replace(temporary, path)


def read(path: Path, limit: int | None = REPORT_LIMIT) -> dict | None:
    """Judge side: the report as a dict, or None when there is none (or it is not a JSON object of at most
    `limit` bytes; None: a record of any size).  Opened without following links: its folder is the learner's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        return None
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return report if isinstance(report, dict) else None


class Ran(NamedTuple):
    """One run of a kit probe or runner (see run)."""
    report: dict | None  # its report; None when it left none
    code: int | None     # its exit code; None when it did not end within the timeout (it was stopped)
    output: str          # what it printed, stdout and stderr together


def run(args: list[str], folder: Path, name: str, timeout: float, cwd: Path, limit: int | None = REPORT_LIMIT) -> Ran:
    """Judge side: `python ARGS` in cwd, reporting to a fresh folder/NAME.report.json, its output in folder/NAME.log.
    Not ended within `timeout`: stopped, with all it started (its own session: a pool's workers too).
    `limit`: read()'s."""
    from shared.proc import Process, WaitTimeout, wait_until  # the judge's: a probe never loads it from here

    path = fresh_path(folder, name)
    log = folder / f"{name}.log"
    log.unlink(missing_ok=True)  # Process appends: each run's output starts empty
    proc = Process([sys.executable, *args], cwd=cwd, log_path=log, env={**os.environ, REPORT_ENV: str(path)})
    try:
        wait_until(lambda: not proc.alive(), timeout, f"{name} to finish")
    except WaitTimeout:
        proc.stop(grace=2)
        return Ran(None, None, proc.log_text())
    code = proc.stop()
    return Ran(read(path, limit), code, proc.log_text())
