"""Start, wait for and stop real processes — by the PIDs we started, never by name.

Every wait here is bounded and polls real state (a port, a log line, an HTTP
answer); none sleeps and hopes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from shared.i18n import t
from shared.warm import WarmPopen


class WaitTimeout(AssertionError):
    """A bounded wait ran out.  An AssertionError, so a check reports it as a failure."""


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll predicate() until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(t("waited {timeout:g}s for {what}", timeout=timeout, what=what))
        time.sleep(interval)


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat as fields [pid, comm, state, ppid, pgrp, ...], or None when the process is gone.
    The command name may hold spaces or parentheses, so split after the last ')'."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return [text[: text.index("(")].strip(), text[text.index("(") + 1: text.rindex(")")],
                *text[text.rindex(")") + 2:].split()]
    except ValueError:
        return None


def living_with(field: int, value: int) -> list[int]:
    """The pids, in order, of the live (not zombie) processes whose stat field `field` is `value`
    (3: the parent's pid, 4: the process group)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[field] == str(value) and stat[2] != "Z":
                found.append(int(entry.name))
    return sorted(found)


def is_zombie(pid: int) -> bool:
    """Finished but not reaped yet (or gone): either way, not running."""
    stat = proc_stat(pid)
    return stat is None or stat[2] == "Z"


def kill_pid(pid: int, timeout: float, what: str, interval: float = 0.05) -> None:
    """SIGKILL to a process we did not start ourselves (a worker's pool child, by the pid it recorded: the crash
    case), then wait until it runs no more (gone, or a zombie its parent has not reaped yet)."""
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: is_zombie(pid), timeout, what, interval=interval)


@contextlib.contextmanager
def stopped(pid: int):
    """This one process (not its group: a worker's pool children run on) stopped for the block -- SIGSTOP,
    then SIGCONT however the block ends; a process gone meanwhile is left to the block's own checks."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def run_python(args: list[str], cwd: Path | str, timeout: float,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python ARGS` in cwd with this interpreter (forked warm when it can be: shared/warm.py);
    output captured as text (stderr folded in).  Still running after `timeout`: killed, TimeoutExpired."""
    argv = [sys.executable, *args]
    with WarmPopen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   encoding="utf-8", errors="replace") as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, output, None)


_live: set[Process] = set()
_verdicts_given = False


def verdicts_given() -> None:
    """Every check of this run has reported.  In a box, which is thrown away whole right after, what is
    still running is killed from now on rather than given a warm shutdown: no verdict waits on it any more,
    and a Celery worker's warm shutdown alone takes a second or more."""
    global _verdicts_given
    _verdicts_given = True


def stop_grace(grace: float) -> float:
    """The grace a stop gets now: none once the verdicts are given in a box (verdicts_given)."""
    return 0.0 if _verdicts_given and os.environ.get("TASKLAB_BOXED") == "1" else grace


@atexit.register
def stop_leftovers() -> None:
    # A verifier that fails half-way (or is TERMed by the runner) still stops what it started.
    for proc in list(_live):
        proc.stop(grace=3)


def disown_started() -> None:
    """Forget the processes started so far: a forked process leaves its parent's to its parent."""
    _live.clear()


class Process:
    """A background process we own: started in its own session, output to a log file."""

    def __init__(self, argv: list[str], cwd: Path | str, log_path: Path | str, env: dict | None = None):
        self.argv = argv
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        # A log may hold an earlier run's lines (a lesson started again after a timeout): this process's
        # readiness and evidence are read from where its own output begins.
        self._offset = self._log.tell()
        self.popen = WarmPopen(  # forked warm when it can be (shared/warm.py)
            argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        _live.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        """Still running.  Asked without reaping: until stop() reaps the leader, its pid (the group's id)
        cannot pass to another process, so a signal to the group reaches only what this one started."""
        if self.popen.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:  # reaped by a wait elsewhere
            return self.popen.poll() is None

    def wait_ended(self) -> None:
        """Wait (no timeout: the caller bounds it, by signals) until the leader has ended, without reaping it:
        its group can still be signalled safely afterwards, as in alive()."""
        if self.popen.returncode is not None:
            return
        try:
            os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:  # reaped by a wait elsewhere
            pass

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as stream:
                stream.seek(self._offset)
                return stream.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_ready(self, timeout: float, port: int | None = None, log_contains: str | None = None) -> None:
        """Wait until the port accepts connections and/or a log line appears; fail fast if it exits."""
        def ready():
            if not self.alive():
                return "exited"
            if port is not None and not port_open(port):
                return False
            if log_contains is not None and log_contains not in self.log_text():
                return False
            return True
        try:
            command = " ".join(map(str, self.argv[:4]))
            outcome = wait_until(ready, timeout, t("{command} to be ready", command=command))
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.log_tail()}") from None
        if outcome == "exited":
            code = self.stop(grace=0)  # reaped, with whatever it left behind
            raise WaitTimeout(t("{argv} exited with {returncode} before it was ready:\n", argv=self.argv[0],
                                returncode=code)
                              + self.log_tail())

    def signal_group(self, sig: int) -> None:
        # The process leads its own session (start_new_session), so its group id is its pid: this reaches
        # the children it started (e.g. uvicorn's reloader, a pool) and nothing else -- as long as the
        # leader is not reaped (a reaped leader's pid may be another process's group by now).
        if self.popen.returncode is not None:
            return
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):  # gone, or only processes we may not signal are left
            pass

    def kill(self) -> None:
        """SIGKILL: the crash case — no finally blocks, no shutdown hooks."""
        self.signal_group(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._log.close()
        _live.discard(self)

    def stop(self, grace: float = 5.0) -> int:
        """TERM to the group, up to `grace` seconds for the leader to end, then KILL to what is left of the
        group (the leader, or what it left running, also when it ended on its own), and reap.  The exit code."""
        grace = stop_grace(grace)
        if self.alive() and grace > 0:  # no grace: KILL alone (a TERM first could still be heard)
            self.signal_group(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
        self.signal_group(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._log.close()
        _live.discard(self)
        return self.popen.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def wait_all_ready(procs, timeout: float, grace: float = 5.0, **ready) -> None:
    """Wait until each of these processes (None: not started) is ready (Process.wait_ready's `port`,
    `log_contains`), each within `timeout`.  Started before the first wait, they start up side by side.  If one
    is not ready, every one of them is stopped (`grace`: see Process.stop) and the error goes up."""
    procs = [proc for proc in procs if proc is not None]
    try:
        for proc in procs:
            proc.wait_ready(timeout, **ready)
    except BaseException:
        for proc in procs:
            proc.stop(grace=grace)
        raise


def start_uvicorn(app: str, cwd: Path | str, log_path: Path | str, port: int | None = None,
                  timeout: float = 15.0, env: dict | None = None) -> tuple[Process, int]:
    """Start `python -m uvicorn APP` on a free loopback port (in `env`, else this environment) and wait until
    it accepts connections."""
    port = port or free_port()
    proc = Process([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)],
                   cwd=cwd, log_path=log_path, env=env)
    try:
        proc.wait_ready(timeout, port=port)
    except BaseException:
        proc.stop()
        raise
    return proc, port


def pid_running(pid: int) -> bool:
    """Alive and not a zombie (a finished child its parent has not reaped yet)."""
    stat = proc_stat(pid)
    return stat is not None and stat[2] != "Z"


def children_of(pid: int) -> list[int]:
    return living_with(3, pid)


def group_members(pgid: int) -> list[int]:
    return living_with(4, pgid)
