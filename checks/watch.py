"""`make watch`: a lesson's checks run again on the learner's folder whenever a file in it changes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from checks.console import print_lesson
from checks.session import run_many
from shared.i18n import t

IGNORED = {".venv", "venv", "__pycache__", ".git", ".state", ".lab", ".pytest_cache"}


def folder_signature(folder: Path) -> tuple:
    """What changes when a learner saves a file: names, sizes and mtimes (polling works on WSL2 and network drives)."""
    entries = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in IGNORED]
        for name in files:
            path = Path(root, name)
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            entries.append((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


def watch(lesson: dict, data: dict, folder: Path, interval: float, max_runs: int | None = None) -> None:
    """Check `lesson` on `folder` now and after every change, showing the first failure only; Ctrl-C ends it."""
    seen, runs = None, 0
    try:
        while max_runs is None or runs < max_runs:
            current = folder_signature(folder)
            if current != seen:
                seen = current
                runs += 1
                if sys.stdout.isatty():
                    print("\033[2J\033[H", end="")
                [result] = run_many([lesson], data, folder, "watch")
                print_lesson(result, first_failure_only=True)
                print("\n" + t("watching {folder} (Ctrl-C to stop)", folder=folder), flush=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        print("\n" + t("stopped watching"))
