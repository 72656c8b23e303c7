"""shared/lesson_celery.py's helpers for the Celery lessons (08–16), each with a small test of its own; and a server
stopped for a drill (shared.servicectl.stop_for_drill; lessons 11 and 12)."""

import base64
import json
import os
import subprocess
import sys
import textwrap

import pytest

from shared import lesson_celery, lesson_db, scripts, servicectl
from shared.lesson_celery import (DeclaredWorker, LearnerTask, declared_worker, learner_task, private_worker_argv,
                                  queued_messages, queued_task_ids, result_in_probe, send_in_probe, spawn,
                                  state_in_probe, take_back)

DECLARED = ["{python}", "-m", "celery", "-A", "celery_app:app", "worker", "-l", "INFO", "-Q", "exports",
            "--concurrency=2", "-n", "lab09@%h", "--without-mingle", "--without-gossip"]


class Noted:
    """A stand-in for a check: what was noted on it."""

    def __init__(self):
        self.notes = []

    def note(self, text):
        self.notes.append(text)


def test_private_worker_argv_keeps_the_command_on_a_queue_and_node_of_its_own():
    assert private_worker_argv(DECLARED, "lab09-drill", "drill@host", app="lab09_drill:app") == [
        "{python}", "-m", "celery", "-A", "lab09_drill:app", "worker", "-l", "INFO", "--without-mingle",
        "--without-gossip", "-Q", "lab09-drill", "--concurrency=1", "-n", "drill@host"]
    # Every spelling of queue, node and concurrency goes, with its value; without `app` the app stays.
    other = ["-A", "lab15_worker:app", "worker", "--queues", "a,b", "-c", "4", "--hostname=x@%h", "--queues=c",
             "--concurrency", "3", "--hostname", "y@%h", "-l", "INFO"]
    assert private_worker_argv(other, "lab15.warm", "lab15warm@%h") == [
        "-A", "lab15_worker:app", "worker", "-l", "INFO", "-Q", "lab15.warm", "--concurrency=1", "-n", "lab15warm@%h"]


def test_declared_worker_says_why_it_is_missing_and_is_read_once(monkeypatch):
    monkeypatch.setattr(lesson_celery, "_declared", {})
    monkeypatch.delenv("TASKLAB_PROC_LABTEST_PID", raising=False)
    with pytest.raises(AssertionError, match="TASKLAB_PROC_LABTEST_PID is not set"):
        declared_worker("LABTEST")
    monkeypatch.setenv("TASKLAB_PROC_LABTEST_PID", str(os.getpid()))
    monkeypatch.setenv("TASKLAB_PROC_LABTEST_ARGV", json.dumps(DECLARED))
    worker = declared_worker("LABTEST")
    assert isinstance(worker, DeclaredWorker) and declared_worker("LABTEST") is worker
    assert worker.pid == os.getpid() and worker.nodename.startswith("lab09@")
    assert worker.running() is worker  # this process is alive


def test_running_fails_with_the_log_tail_once_the_worker_has_exited(monkeypatch, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid is free
    log = tmp_path / "worker.log"
    log.write_text("x" * 1000 + "the last words")
    monkeypatch.setenv("TASKLAB_PROC_LABGONE_PID", str(gone.pid))
    monkeypatch.setenv("TASKLAB_PROC_LABGONE_ARGV", json.dumps(DECLARED))
    monkeypatch.setenv("TASKLAB_PROC_LABGONE_LOG", str(log))
    worker = DeclaredWorker("LABGONE")
    with pytest.raises(AssertionError) as raised:
        worker.running(tail=20)
    assert str(raised.value) == f"the worker (pid {gone.pid}) has exited; log tail:\nxxxxxxthe last words"


class FakeRedis:
    """A queue list as Redis keeps it: LRANGE reads, LREM removes."""

    def __init__(self, items):
        self.items = list(items)

    def lrange(self, queue, start, end):
        return list(self.items)

    def lrem(self, queue, count, item):
        if item in self.items:
            self.items.remove(item)
            return 1
        return 0

    def close(self):
        pass


def test_queued_messages_read_headers_and_take_back_removes_only_the_kit_s_own(monkeypatch):
    v2 = json.dumps({"headers": {"id": "id-2", "task": "products.schedule_tick"}, "body": ""}).encode()
    v1 = json.dumps({"headers": {}, "body": base64.b64encode(json.dumps({"id": "id-1"}).encode()).decode()}).encode()
    broker = FakeRedis([v2, b"not json", b"[1, 2]", v1])
    monkeypatch.setattr(lesson_celery, "redis_client", lambda url=None: broker)
    assert queued_messages("q") == [(v2, {"id": "id-2", "task": "products.schedule_tick"}), (v1, {})]
    assert queued_task_ids("q") == ["id-2", "id-1"]
    assert take_back("q", []) == 0
    assert take_back("q", [v2, b"gone already"]) == 1
    assert broker.items == [b"not json", b"[1, 2]", v1]


def test_spawn_starts_our_process_with_a_fresh_log_and_does_not_wait(monkeypatch, tmp_path):
    monkeypatch.setattr(lesson_celery, "WORK", tmp_path)
    monkeypatch.setattr(lesson_celery, "LOG_DIR", tmp_path / "logs")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "mine.log").write_text("an old run's log\n")
    (tmp_path / "hello.py").write_text("import os, sys\nprint('hello', os.environ['LABTEST_WORD'], sys.executable)\n")
    proc = spawn(["{python}", "hello.py"], "mine.log", env=dict(os.environ, LABTEST_WORD="there"))
    assert proc.popen.wait(timeout=20) == 0
    proc.stop()
    text = (tmp_path / "logs" / "mine.log").read_text()
    assert "an old run" not in text and f"hello there {sys.executable}" in text


TASKS_MODULE = textwrap.dedent('''
    class Result:
        def __init__(self, task_id):
            self.id, self.state = task_id, "SUCCESS"

        def get(self, timeout):
            if timeout < 1:
                raise TimeoutError("no result yet")
            return {"id": self.id, "timeout": timeout}


    class Task:
        sent = []

        def apply_async(self, args=None, **options):
            self.sent.append((args, options))
            return Result(options.get("task_id", "generated"))

        def AsyncResult(self, task_id):
            return Result(task_id)


    export_products = Task()
''')


@pytest.fixture
def tasks_module(tmp_path, monkeypatch):
    (tmp_path / "h2_learner_tasks.py").write_text(TASKS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "h2_learner_tasks:export_products"
    sys.modules.pop("h2_learner_tasks", None)


def test_the_probe_side_sends_waits_and_reads_with_the_learner_s_task(tasks_module):
    task = learner_task(tasks_module)
    assert task is sys.modules["h2_learner_tasks"].export_products
    # task_id and queue go to apply_async only when given (lesson 10 lets Celery pick the id).
    assert send_in_probe(tasks_module, ["job", [1]], "id-1", "drill") == "id-1"
    assert send_in_probe(tasks_module, ["job", 5.0, 2]) == "generated"
    assert task.sent == [(["job", [1]], {"task_id": "id-1", "queue": "drill"}), (["job", 5.0, 2], {})]
    assert result_in_probe(tasks_module, "id-1", 20) == {"id": "id-1", "timeout": 20}
    with pytest.raises(TimeoutError):  # what get raises goes up, for the probe to report
        result_in_probe(tasks_module, "id-1", 0.5)
    assert state_in_probe(tasks_module, "id-1") == "SUCCESS"


class FakeProbe:
    """A stand-in for shared.probe.Probe: what the judge asked of it."""

    def __init__(self):
        self.asked = []

    def module(self, name, *functions):
        self.asked.append(("module", name, functions))

    def call(self, target, *args, timeout=30.0):
        self.asked.append(("call", target, args, timeout))
        return f"answer of {target.rpartition(':')[2]}"


def test_learner_task_asks_the_probe_for_each_use_of_the_task():
    probe = FakeProbe()
    task = LearnerTask(probe, "export_tasks:export_products")
    task.load()
    assert task.send(["job", []], "id-1") == "answer of send_in_probe"
    task.result("id-1", 1.5)
    task.state("id-1")
    where = "export_tasks:export_products"
    assert probe.asked == [
        ("module", "export_tasks", ("export_products",)),
        ("call", "shared.lesson_celery:send_in_probe", (where, ["job", []], "id-1", None), 30.0),
        # The wait on the result, plus the margin a probe call may take beyond it.
        ("call", "shared.lesson_celery:result_in_probe", (where, "id-1", 1.5), 16.5),
        ("call", "shared.lesson_celery:state_in_probe", (where, "id-1"), 30.0),
    ]
    # Every target the judge names is a function of this module, as the probe resolves it.
    for _, target, *_ in probe.asked[1:]:
        assert callable(getattr(lesson_celery, target.partition(":")[2]))


def test_value_fails_the_check_in_the_lesson_s_words_with_what_get_raised(monkeypatch):
    monkeypatch.setenv("CELERY_RESULT_BACKEND", "redis://:h2-secret-word@127.0.0.1:6384/1")

    class Raising(FakeProbe):
        def call(self, target, *args, timeout=30.0):
            raise RuntimeError("no backend at redis://:h2-secret-word@127.0.0.1:6384/1")

    task = LearnerTask(FakeProbe(), "export_tasks:export_products")
    assert task.value("id-1", 5, lambda why: f"failed: {why}") == "answer of result_in_probe"
    task = LearnerTask(Raising(), "export_tasks:export_products")
    with pytest.raises(AssertionError) as raised:
        task.value("id-1", 5, lambda why: f"task id-1 did not succeed: {why}")
    assert str(raised.value) == "task id-1 did not succeed: RuntimeError: no backend at ***"


def test_settled_waits_for_an_ended_state_and_gives_the_state_it_got():
    class Changing(FakeProbe):
        def __init__(self, states):
            super().__init__()
            self.states = states

        def call(self, target, *args, timeout=30.0):
            self.asked.append(target)
            return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    probe = Changing(["PENDING", "STARTED", "FAILURE"])
    assert LearnerTask(probe, "export_tasks:export_products").settled("id-1", 10) == "FAILURE"
    assert probe.asked == ["shared.lesson_celery:state_in_probe"] * 4  # three looks, then the state it returns
    # Never ended within the bound: the state as it is then (the check judges it), not a time-out.
    assert LearnerTask(Changing(["PENDING"]), "export_tasks:export_products").settled("id-2", 0.2) == "PENDING"


def test_stop_for_drill_stops_and_restarts_or_says_the_item_cannot_be_proved(monkeypatch):
    done = []
    monkeypatch.setattr(servicectl, "stop_service", lambda name: done.append(("stop", name)) or f"{name} pid 7 stopped")
    monkeypatch.setattr(servicectl, "up", lambda names: done.append(("up", names)) or "native")
    assert servicectl.stop_for_drill("redis") == "redis pid 7 stopped"
    assert servicectl.stop_for_drill("mysql", restart=True) == "mysql pid 7 stopped"
    assert done == [("stop", "redis"), ("stop", "mysql"), ("up", ["mysql"])]

    def refuse(name):
        raise servicectl.ServiceError(f"LAB_SERVICES=external: the checker cannot stop a {name} you run yourself")
    monkeypatch.setattr(servicectl, "stop_service", refuse)
    with pytest.raises(AssertionError, match="^this item cannot be proved: LAB_SERVICES=external"):
        servicectl.stop_for_drill("redis")

    # A restart that cannot start the server again is unprovable too (lesson 11's database restart).
    monkeypatch.setattr(servicectl, "stop_service", lambda name: "stopped")

    def cannot_start(names):
        raise servicectl.ServiceError("mysql is not reachable")
    monkeypatch.setattr(servicectl, "up", cannot_start)
    with pytest.raises(AssertionError, match="cannot be proved: mysql is not reachable"):
        servicectl.stop_for_drill("mysql", restart=True)


@pytest.fixture
def work(monkeypatch, tmp_path):
    """A work folder whose publisher.py counts its runs (runs.txt) and prints its run number last."""
    monkeypatch.setattr(scripts, "WORK", tmp_path)
    (tmp_path / "publisher.py").write_text(
        "from pathlib import Path\n"
        "runs = Path('runs.txt')\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "print('publishing')\nprint()\nprint(f'sent {n}' + 'x' * 300 * (n == 9))\n")
    return tmp_path


def sent_after(monkeypatch, work, n: int) -> None:
    """lesson_db.event_sent stood in for: True once publisher.py has run n times."""
    runs = work / "runs.txt"
    monkeypatch.setattr(lesson_db, "event_sent", lambda event_id: runs.exists() and int(runs.read_text()) >= n)


def test_publish_until_sent_runs_the_publisher_until_the_event_is_sent(work, monkeypatch):
    c = Noted()
    sent_after(monkeypatch, work, 3)
    # the last non-empty line
    assert lesson_db.publish_until_sent(c, "event-id", "publisher failed") == "sent 3"
    assert (work / "runs.txt").read_text() == "3" and c.notes == []


def test_publish_until_sent_cuts_the_last_line_to_200(work, monkeypatch):
    (work / "runs.txt").write_text("8")
    sent_after(monkeypatch, work, 9)
    last = lesson_db.publish_until_sent(Noted(), "event-id", "publisher failed")
    assert last == ("sent 9" + "x" * 300)[:200]


def test_publish_until_sent_fails_with_its_words_when_still_unsent(work, monkeypatch):
    sent_after(monkeypatch, work, 99)
    with pytest.raises(AssertionError) as raised:
        lesson_db.publish_until_sent(Noted(), "0123456789abcdef", "publisher failed", runs=2)
    assert str(raised.value) == ("event 01234567… still unsent after 2 runs of python publisher.py (last output: "
                                 "sent 2)")
    assert (work / "runs.txt").read_text() == "2"


def test_publish_until_sent_notes_a_failed_run_and_says_the_callers_words(work, monkeypatch):
    (work / "publisher.py").write_text("print('a')\nprint('b')\nprint('c')\nprint('  d')\nraise SystemExit(1)\n")
    monkeypatch.setattr(lesson_db, "event_sent", lambda event_id: pytest.fail("asked after a failed run"))
    c = Noted()
    with pytest.raises(AssertionError, match=r"^python publisher\.py failed \(output below\)$"):
        lesson_db.publish_until_sent(c, "event-id", "python publisher.py failed (output below)")
    assert c.notes == ["  b", "  c", "    d"]


def test_delivered_to_is_the_workers_node_and_the_messages_queue():
    from types import SimpleNamespace

    from shared.worker_events import delivered_to
    request = SimpleNamespace(hostname="fast@box", delivery_info={"routing_key": "exports.fast", "exchange": ""})
    assert delivered_to(SimpleNamespace(request=request)) == {"node": "fast@box", "queue": "exports.fast"}
    assert delivered_to(SimpleNamespace(request=SimpleNamespace(delivery_info=None))) == {"node": None, "queue": None}
    assert delivered_to(object()) == {"node": None, "queue": None}


