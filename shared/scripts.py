"""A learner's or the kit's script run as the lesson runs it (`python ARGS` in the work folder), and what
it printed taken as evidence: secrets masked, dicts read as literals, never run.
"""

from __future__ import annotations

import ast
import os
import subprocess
from typing import NamedTuple

from shared.proc import run_python
from shared.settings import WORK, redact


def log_lines(text: str, *needles: str, limit: int = 6) -> list[str]:
    """Worker log lines that mention every needle, shortened, with secrets masked."""
    lines = [redact(line) for line in text.splitlines() if all(n in line for n in needles)]
    return [line if len(line) <= 220 else line[:219] + "…" for line in lines[-limit:]]


class Script(NamedTuple):
    """A finished `python ARGS`: its exit code, its output with secrets masked, that output's non-empty lines."""

    code: int
    output: str
    lines: list[str]

    def tail(self, c, shown: int, width: int | None = 200) -> None:
        """Its last `shown` lines noted on check `c`, indented and cut to `width` characters (None: whole)."""
        for line in self.lines[-shown:]:
            c.note("  " + line[:width])


def printed_dicts(lines: list[str]) -> list[dict]:
    """The dicts a script printed, in order: each line whose text from its first "{" is a dict literal."""
    found = []
    for line in lines:
        start = line.find("{")
        try:
            value = ast.literal_eval(line[start:].strip()) if start >= 0 else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal, or too deep
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def run_script(args: list[str], timeout: float, late: str | None = None, env: dict | None = None) -> Script:
    """`python ARGS` in the work folder (`env`: variables added to ours).  Still running after `timeout` s: the
    check fails with `late` (without one, subprocess.TimeoutExpired goes up).  The raw output is never kept:
    it may hold a secret."""
    try:
        done = run_python(args, cwd=WORK, timeout=timeout, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        if late is None:
            raise
        raise AssertionError(late) from None
    output = redact(done.stdout)
    return Script(done.returncode, output, [line for line in output.splitlines() if line.strip()])
