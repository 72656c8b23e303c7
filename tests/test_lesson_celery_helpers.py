"""shared/lesson_celery.py's helpers for the Celery lessons (08–10, 14, 15), each with a small test of its own."""

import base64
import json
import os
import subprocess
import sys

import pytest

from shared import lesson_celery
from shared.lesson_celery import (DeclaredWorker, Script, declared_worker, private_worker_argv, queued_messages,
                                  queued_task_ids, run_script, spawn, take_back)

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
    other = ["-A", "lab15_probe:app", "worker", "--queues", "a,b", "-c", "4", "--hostname=x@%h", "--queues=c",
             "--concurrency", "3", "--hostname", "y@%h", "-l", "INFO"]
    assert private_worker_argv(other, "lab15.warm", "lab15warm@%h") == [
        "-A", "lab15_probe:app", "worker", "-l", "INFO", "-Q", "lab15.warm", "--concurrency=1", "-n", "lab15warm@%h"]


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


def test_run_script_masks_secrets_and_notes_its_tail(monkeypatch, tmp_path):
    monkeypatch.setattr(lesson_celery, "WORK", tmp_path)
    monkeypatch.setenv("LABTEST_PASSWORD", "s3cret-value")
    (tmp_path / "talk.py").write_text("import sys\nprint('one')\nprint()\nprint('  two', sys.argv[1])\n"
                                      "print('pw=s3cret-value')\nraise SystemExit(3)\n")
    done = run_script(["talk.py", "arg"], 20)
    assert isinstance(done, Script)
    code, output, lines = done  # unpacks as lesson 15's runner did
    assert code == 3 and "s3cret-value" not in output and "pw=***" in output
    assert lines == ["one", "  two arg", "pw=***"]  # empty lines left out
    c = Noted()
    done.tail(c, 2, width=5)
    assert c.notes == ["    two", "  pw=**"]
    done.tail(c, 1, width=None)
    assert c.notes[-1] == "  pw=***"


def test_run_script_fails_with_its_message_when_late(monkeypatch, tmp_path):
    monkeypatch.setattr(lesson_celery, "WORK", tmp_path)
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    with pytest.raises(AssertionError, match="^slow.py did not finish$"):
        run_script(["slow.py"], 0.5, late="slow.py did not finish")
    with pytest.raises(subprocess.TimeoutExpired):
        run_script(["slow.py"], 0.5)


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


def test_read_events_keeps_only_the_events_that_match(tmp_path):
    path = tmp_path / "events.jsonl"
    lesson_celery.append_event(path, "start", task_id="a", path="x")
    lesson_celery.append_event(path, "end", task_id="a")
    lesson_celery.append_event(path, "start", task_id="b")
    assert [e["task_id"] for e in lesson_celery.read_events(path, kind="start")] == ["a", "b"]
    assert [e["kind"] for e in lesson_celery.read_events(path, task_id="a")] == ["start", "end"]
    assert lesson_celery.read_events(path, kind="start", path="x")[0]["task_id"] == "a"  # a field named path
    assert lesson_celery.read_events(path, kind="retry") == []
