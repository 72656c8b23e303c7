"""Kit helpers for the Celery verifiers (lessons 08–10).  Not a verifier itself.

- the broker settings, read the way the learner's celery_app reads them (environment first,
  then .env.tasks), and never printed;
- the worker the runner declared in tasks.json (TASKLAB_PROC_WORKER_PID, _ARGV, _LOG): stop it by its PID;
- extra workers the verifier owns (shared.proc.Process), stopped by their PID;
- a look into the broker's queue list without consuming anything;
- for the probes that run inside workers: append_event, one JSON line per event to a shared file;

Shared by the verifiers and probes of lessons 08–16.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from shared.i18n import t
from shared.proc import Process, WaitTimeout, proc_stat, wait_until

WORK = Path.cwd()
LOG_DIR = Path(os.environ.get("TASKLAB_LOG_DIR") or WORK / ".check-logs")
READY_MARK = " ready."  # celery's "<nodename> ready." log line


# ---------------------------------------------------------------- probes and learner modules

def append_event(path: str | Path, kind: str, /, **fields) -> None:
    """One JSON line (kind, pid, time, fields) appended with a single write: the worker's pool children
    append to the same file at once, and O_APPEND keeps every line whole."""
    line = json.dumps({"kind": kind, "pid": os.getpid(), "at": time.time(), **fields}, default=repr)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_events(path: str | Path) -> list[dict]:
    """Every whole JSON line of an event file written by append_event.  A line still being written by
    another process (or cut short by a SIGKILL) is skipped, never a crash."""
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
        if isinstance(event, dict):
            found.append(event)
    return found


def short(value) -> str:
    """The first 8 characters of an id, for messages."""
    return f"{str(value)[:8]}…"


# ---------------------------------------------------------------- settings (never printed)

def env_file_values(path: Path = WORK / ".env.tasks") -> dict[str, str]:
    from shared.credentials import read_env_file
    return read_env_file(path)


def setting(name: str) -> str | None:
    """As load_dotenv(".env.tasks") sees it: a variable already in the environment wins."""
    return os.environ.get(name) or env_file_values().get(name)


def secrets_in(values: dict[str, str]) -> list[str]:
    """Every form of a secret that must never appear in output: passwords, encoded ones, whole URLs."""
    found = []
    for key, value in values.items():
        if not value or not any(part in key for part in ("PASSWORD", "URL", "BACKEND", "SECRET")):
            continue
        if "PASSWORD" in key:
            found.append(value)
        if "://" in value:
            found.append(value)
            password = urlsplit(value).password
            if password:
                found.append(password)
    return [s for s in dict.fromkeys(found) if len(s) >= 6]


def redact(text: str) -> str:
    """Learner output as evidence, with every known secret replaced by ***."""
    for secret in sorted(secrets_in(env_file_values()) + secrets_in(dict(os.environ)), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def describe_url(url: str) -> str:
    """host:port/db of a redis URL, without its credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}{parts.path or ''}"


# ---------------------------------------------------------------- processes by PID

def pid_running(pid: int) -> bool:
    """Alive and not a zombie (a finished child its parent has not reaped yet)."""
    stat = proc_stat(pid)
    return stat is not None and stat[2] != "Z"


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[3] == str(pid) and stat[2] != "Z":
                found.append(int(entry.name))
    return sorted(found)


def group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[4] == str(pgid) and stat[2] != "Z":
                found.append(int(entry.name))
    return found


def nodename_from_argv(argv: list[str]) -> str:
    """The worker's node name as celery expands it (-n NAME@%h), default celery@<host>."""
    name = "celery@%h"
    for index, part in enumerate(argv):
        if part in ("-n", "--hostname") and index + 1 < len(argv):
            name = argv[index + 1]
        elif part.startswith("--hostname="):
            name = part.split("=", 1)[1]
    host = socket.gethostname()
    return name.replace("%h", host).replace("%n", host.split(".")[0]).replace("%d", host.partition(".")[2])


def with_nodename(argv: list[str], nodename: str) -> list[str]:
    out, skip = [], False
    for part in argv:
        if skip:
            skip = False
            continue
        if part in ("-n", "--hostname"):
            skip = True
            continue
        if part.startswith("--hostname="):
            continue
        out.append(part)
    return [*out, "-n", nodename]


class DeclaredWorker:
    """The worker the runner started from tasks.json; the runner reaps it, we may stop it early."""

    def __init__(self, name: str = "WORKER"):
        pid = os.environ.get(f"TASKLAB_PROC_{name}_PID")
        argv = os.environ.get(f"TASKLAB_PROC_{name}_ARGV")
        if not pid or not argv:
            raise AssertionError(t("TASKLAB_PROC_{name}_PID is not set: run the checks through make lesson-NN (python -m "
                                   "checks), which starts the worker", name=name))
        self.pid = int(pid)
        self.argv: list[str] = json.loads(argv)
        self.log_path = Path(os.environ.get(f"TASKLAB_PROC_{name}_LOG") or LOG_DIR / "worker.log")
        self.nodename = nodename_from_argv(self.argv)

    def alive(self) -> bool:
        return pid_running(self.pid)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, grace: float = 15.0) -> float:
        """SIGTERM (celery's warm shutdown) to the main process; KILL its group if it overstays."""
        started = time.monotonic()
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                wait_until(lambda: not self.alive() and not group_members(self.pid), grace,
                           f"worker pid {self.pid} to stop")
            except WaitTimeout:
                # The group id is the pid we were given (the runner starts it in its own session).
                os.killpg(self.pid, signal.SIGKILL)
                wait_until(lambda: not self.alive(), 5, f"worker pid {self.pid} to die")
        return time.monotonic() - started


def start_worker(argv: list[str], log_name: str, timeout: float = 30.0, env: dict | None = None) -> Process:
    """Start a worker we own (in its own session, log in TASKLAB_LOG_DIR) and wait for 'ready.'."""
    log_path = LOG_DIR / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    argv = [sys.executable if part == "{python}" else part for part in argv]
    proc = Process(argv, cwd=WORK, log_path=log_path, env=env)
    try:
        proc.wait_ready(timeout, log_contains=READY_MARK)
    except BaseException:
        proc.stop()
        raise
    return proc


def log_lines(text: str, *needles: str, limit: int = 6) -> list[str]:
    """Worker log lines that mention every needle, shortened, with secrets masked."""
    lines = [redact(line) for line in text.splitlines() if all(n in line for n in needles)]
    return [line if len(line) <= 220 else line[:219] + "…" for line in lines[-limit:]]


# ---------------------------------------------------------------- the broker, read-only

def redis_client(url: str | None = None):
    import redis
    return redis.Redis.from_url(url or setting("CELERY_BROKER_URL"), socket_connect_timeout=3, socket_timeout=5)


def queued_task_ids(queue: str = "exports") -> list[str]:
    """Task ids of the messages waiting in a queue (LRANGE: nothing is consumed)."""
    client = redis_client()
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    ids = []
    for item in raw:
        try:
            message = json.loads(item)
            ids.append(message.get("headers", {}).get("id") or
                       json.loads(base64.b64decode(message["body"])).get("id"))
        except (ValueError, KeyError, TypeError):
            continue
    return [i for i in ids if i]
