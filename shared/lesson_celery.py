"""Kit helpers for the verifiers of the Celery lessons (08–16).  Not a verifier itself.

- the broker settings, read the way the learner's celery_app reads them (environment first,
  then .env.tasks), and never printed;
- the worker the runner declared in tasks.json (TASKLAB_PROC_WORKER_PID, _ARGV, _LOG): stop it by its PID;
- extra workers the verifier owns (shared.proc.Process), stopped by their PID;
- a look into the broker's queue list without consuming anything, and taking the kit's own messages back;
- a learner's or the kit's script run as the lesson runs it, its output with secrets masked;
- the learner's Celery task sent with, waited on and asked about in a probe (LearnerTask), never in the judge;
- for the probes that run inside workers: append_event, one JSON line per event to a shared file;

Shared by the verifiers and probes of lessons 08–16.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from shared.i18n import t
from shared.logs import LOG_DIR
from shared.proc import Process, WaitTimeout, living_with, proc_stat, run_python, stop_grace, wait_until

WORK = Path.cwd()
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
    return living_with(3, pid)


def group_members(pgid: int) -> list[int]:
    return living_with(4, pgid)


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


def private_worker_argv(argv: list[str], queue: str, nodename: str, app: str | None = None) -> list[str]:
    """The declared worker's command (its app, probe and options) for a worker of the kit's own: one process on a
    private queue under its own node name, the app swapped for `app` when given (a drill module in its place)."""
    out, skip = [], False
    for part in argv:
        if skip:
            skip = False
        elif part in ("-Q", "--queues", "-n", "--hostname", "-c", "--concurrency"):
            skip = True  # and its value
        elif not part.startswith(("--queues=", "--hostname=", "--concurrency=")):
            out.append(app if app and part == "celery_app:app" else part)
    return [*out, "-Q", queue, "--concurrency=1", "-n", nodename]


class DeclaredWorker:
    """The worker the runner started from tasks.json; the runner reaps it, we may stop it early."""

    def __init__(self, name: str = "WORKER"):
        pid = os.environ.get(f"TASKLAB_PROC_{name}_PID")
        argv = os.environ.get(f"TASKLAB_PROC_{name}_ARGV")
        if not pid or not argv:
            raise AssertionError(t("TASKLAB_PROC_{name}_PID is not set: run the checks through make lesson-NN "
                                   "(python -m checks), which starts the worker", name=name))
        self.pid = int(pid)
        self.argv: list[str] = json.loads(argv)
        self.log_path = Path(os.environ.get(f"TASKLAB_PROC_{name}_LOG") or LOG_DIR / "worker.log")
        self.nodename = nodename_from_argv(self.argv)

    def alive(self) -> bool:
        return pid_running(self.pid)

    def running(self, tail: int = 600) -> DeclaredWorker:
        """This worker, for a check that needs it running: once it has exited the check fails with its log tail."""
        assert self.alive(), t("the worker (pid {pid}) has exited; log tail:\n{log_text}", pid=self.pid,
                               log_text=self.log_text()[-tail:])
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, grace: float = 15.0) -> float:
        """SIGTERM (celery's warm shutdown) to the main process; KILL its group if it overstays."""
        grace = stop_grace(grace)
        started = time.monotonic()
        if self.alive():
            if grace > 0:  # no grace: KILL alone (a TERM first could still start a warm shutdown)
                os.kill(self.pid, signal.SIGTERM)
                with contextlib.suppress(WaitTimeout):
                    wait_until(lambda: not self.alive() and not group_members(self.pid), grace,
                               f"worker pid {self.pid} to stop")
            if self.alive() or group_members(self.pid):
                # The group id is the pid we were given (the runner starts it in its own session).
                with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                    os.killpg(self.pid, signal.SIGKILL)
                wait_until(lambda: not self.alive(), 5, f"worker pid {self.pid} to die")
        return time.monotonic() - started


_declared: dict[str, DeclaredWorker] = {}


def declared_worker(name: str = "WORKER") -> DeclaredWorker:
    """The worker the runner declared, asked for inside each check that needs it (read once): without one that
    check fails, saying why, and the checks that do not need it still run."""
    if name not in _declared:
        _declared[name] = DeclaredWorker(name)
    return _declared[name]


def spawn(argv: list[str], log_name: str, env: dict | None = None) -> Process:
    """Start a process we own in the work folder ("{python}" in argv: this interpreter), its log fresh in
    TASKLAB_LOG_DIR; not waited for."""
    log_path = LOG_DIR / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    argv = [sys.executable if part == "{python}" else part for part in argv]
    return Process(argv, cwd=WORK, log_path=log_path, env=env)


def start_worker(argv: list[str], log_name: str, timeout: float = 30.0, env: dict | None = None) -> Process:
    """Start a worker we own (spawn) and wait for 'ready.'."""
    proc = spawn(argv, log_name, env)
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


# ---------------------------------------------------------------- scripts, as the lesson runs them

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


# ---------------------------------------------------------------- the learner's task, through a probe

def learner_task(where: str):
    """The learner's task "module:name" (e.g. "export_tasks:export_products"), imported where this runs: in a
    probe next to the learner's modules (shared/probe.py), never in the judge."""
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def send_in_probe(where: str, args: list, task_id: str | None = None, queue: str | None = None) -> str:
    """In the probe: task.apply_async(args=args) with task_id= and queue= when given: the message's id."""
    options = {key: value for key, value in (("task_id", task_id), ("queue", queue)) if value}
    return learner_task(where).apply_async(args=args, **options).id


def result_in_probe(where: str, task_id: str, seconds: float):
    """In the probe: AsyncResult(task_id).get(timeout=seconds), the task's return value.  What get raises (the
    task's own error, Celery's TimeoutError) is raised there too, and rebuilt on the judge's side."""
    return learner_task(where).AsyncResult(task_id).get(timeout=seconds)


def state_in_probe(where: str, task_id: str) -> str:
    """In the probe: AsyncResult(task_id).state, as the learner's result backend has it."""
    return learner_task(where).AsyncResult(task_id).state


ENDED_STATES = ("SUCCESS", "FAILURE", "REVOKED")  # the Celery states a task never leaves


class LearnerTask:
    """The learner's Celery task "module:name" as a judge uses it: loaded, sent with, waited on and asked about in
    `probe` (a shared.probe.Probe), never loaded in the judge.  Plain data comes back; the judge decides."""

    def __init__(self, probe, where: str, margin: float = 15):
        self.probe, self.where = probe, where
        self.margin = margin  # seconds a result() call may take beyond the wait on the result it asks for

    def load(self) -> None:
        """The task's module imported in the probe, defining the task: an AssertionError that says why not."""
        self.probe.module(*self.where.split(":"))

    def send(self, args: list, task_id: str | None = None, queue: str | None = None) -> str:
        return self.probe.call("shared.lesson_celery:send_in_probe", self.where, args, task_id, queue)

    def result(self, task_id: str, seconds: float):
        return self.probe.call("shared.lesson_celery:result_in_probe", self.where, task_id, seconds,
                               timeout=seconds + self.margin)

    def value(self, task_id: str, seconds: float, failed):
        """result(), for a check that needs the task to succeed: whatever get raised fails the check with
        failed(why), a lesson's words around why ("Type: message", secrets masked)."""
        try:
            return self.result(task_id, seconds)
        except Exception as exc:  # noqa: BLE001 - what the learner's task (or Celery) raised is the finding
            raise AssertionError(failed(redact(f"{type(exc).__name__}: {exc}"))) from None

    def state(self, task_id: str) -> str:
        return self.probe.call("shared.lesson_celery:state_in_probe", self.where, task_id)

    def settled(self, task_id: str, seconds: float) -> str:
        """The task's state once it has ended (ENDED_STATES), or as it is after `seconds`: a bounded wait, so the
        check judges the state it gets, never the clock."""
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: self.state(task_id) in ENDED_STATES, seconds, f"{task_id} to end", interval=0.1)
        return self.state(task_id)


# ---------------------------------------------------------------- the broker

def kit_inspect(nodename: str, method: str, within: float, **arguments):
    """One running worker's answer to a remote-control query ("registered", "conf", "active", ...), asked
    through the kit's own Celery client on the lesson's broker: what the worker itself answers, never what
    a process that imported the learner's app prints or says.  A broadcast sent before the worker's control
    channel is subscribed is dropped, not queued (right after `ready.` that can happen), so it is asked again
    until it answers, for `within` seconds at most; None when it never did."""
    from celery import Celery
    app = Celery("tasklab-judge", broker=setting("CELERY_BROKER_URL"))

    def reply():
        replies = getattr(app.control.inspect(destination=[nodename], timeout=3), method)(**arguments) or {}
        return (replies[nodename],) if nodename in replies else None  # wrapped: the reply itself may be empty
    try:
        return wait_until(reply, within, f"{nodename} to answer inspect {method}", interval=0.1)[0]
    except WaitTimeout:
        return None
    finally:
        app.close()


def redis_client(url: str | None = None):
    import redis
    return redis.Redis.from_url(url or setting("CELERY_BROKER_URL"), socket_connect_timeout=3, socket_timeout=5)


def queued_messages(queue: str = "exports") -> list[tuple[bytes, dict]]:
    """The messages waiting in a queue, as (raw, headers) (LRANGE: nothing is consumed); one that is not a
    JSON object is skipped."""
    client = redis_client()
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    found = []
    for item in raw:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            found.append((item, json.loads(item).get("headers") or {}))
    return found


def queued_task_ids(queue: str = "exports") -> list[str]:
    """Task ids of the messages waiting in a queue (protocol 2 in the headers, protocol 1 in the body)."""
    ids = []
    for item, headers in queued_messages(queue):
        try:
            ids.append(headers.get("id") or json.loads(base64.b64decode(json.loads(item)["body"])).get("id"))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return [i for i in ids if i]


def take_back(queue: str, items: list[bytes]) -> int:
    """The kit's own messages (raw, as queued_messages gave them) removed from a queue, so that no later
    worker runs them: how many were still there."""
    if not items:
        return 0
    client = redis_client()
    try:
        return sum(int(client.lrem(queue, 1, item)) for item in items)
    finally:
        client.close()
