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

from shared.proc import wait_until

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
        _end_left(before)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _end_left(before: set[int]) -> None:
    """What a test left running from inside (a failed one: a passed one asserted left() == {}) is killed and
    reaped, so no burner spins on through the rest of the suite.  Each is our child, so its pid stays its
    own until we reap it; ending one hands its own children on to us, hence the rounds."""
    for _ in range(10):
        pids = _children() - before
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b"?"


def interrupt_once(proc: subprocess.Popen, marker: str, timeout: float, ready=None) -> tuple[str, int]:
    """Read `proc`'s output until a line holds `marker` (and then, if given, until ready() is true: both
    bounded by `timeout`), send it SIGINT (Ctrl-C), and wait for it to end (bounded): everything it
    printed, and its exit code."""
    seen = ""
    while marker not in seen:
        line = proc.stdout.readline()
        assert line, f"ended before {marker!r}:\n{seen}"
        seen += line
    if ready is not None:
        wait_until(ready, timeout, "the processes to be under way")
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=timeout)
    return seen + rest, proc.returncode
