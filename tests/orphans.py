"""Processes a test starts: what they leave behind, found without names (the test process becomes a child
subreaper, Linux prctl, so every orphan of what it starts is re-parented to it and can be counted), and
an interrupt sent once one has got to a given point."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _children() -> set[int]:
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                found.add(int(entry.name))
    return found


def _reaped(pid: int) -> bool:
    """An adopted orphan that has exited waits as a zombie for us: reap it (it is ours now)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


@contextlib.contextmanager
def adopting():
    """with adopting() as left: ... ; left() -> {pid: cmdline} of what is still running from inside."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    before = _children()

    def left() -> dict[int, bytes]:
        pids = {pid for pid in _children() - before if not _reaped(pid)}
        return {pid: _cmdline(pid) for pid in pids}
    try:
        yield left
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b"?"


def interrupt_once(proc: subprocess.Popen, marker: str, timeout: float) -> tuple[str, int]:
    """Read `proc`'s output until a line holds `marker`, send it SIGINT (Ctrl-C), and wait for it to end
    (bounded): everything it printed, and its exit code."""
    seen = ""
    while marker not in seen:
        line = proc.stdout.readline()
        assert line, f"ended before {marker!r}:\n{seen}"
        seen += line
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=timeout)
    return seen + rest, proc.returncode
