"""A one-shot probe's report travels in a file of its own, never on the stdout it shares with learner code.

A probe that runs a learner's script (lessons 02 and 06) used to print its report as one marked line.  That
line shares the stream with whatever the learner's code and its pool workers print, so a worker's traceback
written at the same moment could land in front of it and the report was "missing" — a verdict decided by
the scheduler.  Now the judge names a fresh file (REPORT_ENV) and reads it after the probe has ended:

    judge:  path = fresh_path(LOGS, "probe-normal");  run the probe with env {REPORT_ENV: str(path)}
            report = read(path)                       # a dict, or None when the probe left none
    probe:  write(report)                             # last thing it does

Observations, never verdicts: the judge checks the report's shape and decides.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def read(path: Path) -> dict | None:
    """Judge side: the report as a dict, or None when there is none (or it is not a JSON object of sane size).
    Opened without following links: the folder it sits in is the learner's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(REPORT_LIMIT + 1)
    if len(data) > REPORT_LIMIT:
        return None
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return report if isinstance(report, dict) else None
