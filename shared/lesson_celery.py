"""Kit helpers for the verifiers of the Celery lessons (08–16), about Celery only.  Not a verifier itself.

- the worker the runner declared in tasks.json (TASKLAB_PROC_WORKER_PID, _ARGV, _LOG): stop it by its PID;
- extra workers the verifier owns (shared.proc.Process), stopped by their PID;
- a look into the broker's queue list without consuming anything, and taking the kit's own messages back;
- the learner's Celery task sent with, waited on and asked about in a probe (LearnerTask), never in the judge.

What the Celery lessons share that is not Celery lives beside it: event files (shared/events.py), the
work folder's settings and the masking of secrets (shared/settings.py), scripts run as the lesson runs
them (shared/scripts.py), processes by pid (shared/proc.py).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from shared.i18n import t
from shared.logs import LOG_DIR
from shared.proc import Process, WaitTimeout, group_members, pid_running, stop_grace, wait_until
from shared.settings import WORK, redact, setting

READY_MARK = " ready."  # celery's "<nodename> ready." log line


# ---------------------------------------------------------------- workers by PID


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
