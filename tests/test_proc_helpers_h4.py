"""shared.proc's helpers for processes a verifier starts or kills: each with a small test of its own."""

import subprocess
import sys

import pytest

from shared.proc import Process, WaitTimeout, is_zombie, kill_pid, wait_all_ready


def test_kill_pid_kills_a_process_we_did_not_start_and_waits_until_it_runs_no_more():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not is_zombie(child.pid)
        kill_pid(child.pid, 10, "the child to die")
        assert is_zombie(child.pid)  # not reaped yet: a zombie runs no more
        assert child.wait(timeout=10) == -9
    finally:
        child.kill()
        child.wait(timeout=10)


def test_kill_pid_of_a_process_that_is_gone_raises():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    with pytest.raises(ProcessLookupError):
        kill_pid(child.pid, 1, "a reaped child to die")


def _printer(tmp_path, name: str, code: str) -> Process:
    return Process([sys.executable, "-c", code], cwd=tmp_path, log_path=tmp_path / f"{name}.log")


def test_wait_all_ready_waits_for_each_started_process(tmp_path):
    code = "import time; print('up', flush=True); time.sleep(60)"
    procs = [_printer(tmp_path, "a", code), None, _printer(tmp_path, "b", code)]
    try:
        wait_all_ready(procs, 30, log_contains="up")
        assert all(proc.alive() for proc in procs if proc is not None)
    finally:
        for proc in procs:
            if proc is not None:
                proc.stop(grace=1)


def test_wait_all_ready_stops_every_one_when_one_is_not_ready(tmp_path):
    good = _printer(tmp_path, "good", "import time; print('up', flush=True); time.sleep(60)")
    bad = _printer(tmp_path, "bad", "raise SystemExit(3)")
    with pytest.raises(WaitTimeout, match="before it was ready"):
        wait_all_ready([good, bad], 30, grace=1, log_contains="up")
    assert not good.alive() and not bad.alive()
    assert bad.popen.returncode == 3
