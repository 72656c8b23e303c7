"""The hold gate's two sides (shared/hold_gate.py: probe_gate in a worker, HoldList in the checker), the helper
processes' rounds (shared/handshake.py: serve, HelperGroup.go_round) and start_uvicorn's environment."""

import subprocess
import sys
import textwrap

import pytest

from shared import handshake
from shared.hold_gate import HoldList
from shared.events import read_events
from shared.manifest import KIT_ROOT
from shared.proc import WaitTimeout, start_uvicorn, wait_until


def _probe(folder, code: str) -> subprocess.Popen:
    """A worker-like process with TASKLAB_LOG_DIR=folder running `code` after the kit is importable."""
    script = f"import sys\nsys.path.insert(0, {str(KIT_ROOT)!r})\n" + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", script], cwd=folder,
                            env={"TASKLAB_LOG_DIR": str(folder), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("phase", [None, "write"])
def test_probe_gate_holds_a_listed_job_until_the_checker_releases_it(tmp_path, phase):
    gate = HoldList(tmp_path, "lx")
    gate.hold("job-1", "job-2", phase=phase)
    assert gate.path.read_text() == ("write job-1\nwrite job-2\n" if phase else "job-1\njob-2\n")
    proc = _probe(tmp_path, f"""
        from shared.hold_gate import probe_gate
        gate = probe_gate("lx", 60.0, phase={phase!r})
        gate.record("start", job="job-2")
        open("other.txt", "w").close()     # not held
        open("job-2.out", "w").close()     # held until released
        open("job-2.out", "w").close()     # only the first write waits
    """)
    try:
        held = gate.wait_held(["job-1", "job-2"], 30, "the probe to hold job-2", phase=phase, interval=0.02)
        assert held["job"] == "job-2" and held["path"].endswith("job-2.out")
        assert held.get("phase") == phase
        assert proc.poll() is None  # still held
        assert gate.holds("job-1", phase) == [] and len(gate.holds("job-2", phase)) == 1
        if phase:
            assert gate.holds("job-2", "claim") == []
        gate.release("job-2", phase=phase)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    kinds = [(e["kind"], e.get("job"), e.get("released")) for e in read_events(gate.events)]
    assert kinds == [("start", "job-2", None), ("hold", "job-2", None), ("release", "job-2", True)]


def test_wait_held_times_out_when_no_worker_reaches_the_gate(tmp_path):
    with pytest.raises(WaitTimeout):
        HoldList(tmp_path, "lx").wait_held(["job-1"], 0.1, "nothing", interval=0.02)


HELPER = """
import sys
sys.path.insert(0, {kit!r})
from shared import handshake
folder, name, *args = sys.argv[1:]
handshake.serve(folder, name, lambda plan: {{"name": name, "args": args, "plan": plan,
                                            "env": __import__("os").environ.get("LX_MARK")}}, rounds={rounds})
"""


@pytest.mark.parametrize("rounds", [None, 2])
def test_helper_group_runs_every_helper_round_after_round(tmp_path, rounds):
    script = tmp_path / "helper.py"
    script.write_text(HELPER.format(kit=str(KIT_ROOT), rounds=rounds))
    env = {"LX_MARK": "seen", "PATH": "/usr/bin:/bin"}
    with handshake.HelperGroup([str(script)], ["A", "B"], tmp_path / "hs", "helper", ("x", "y"), env) as group:
        for k in (1, 2):
            round_no = group.go_round(k=k)
            assert round_no == k
            wait_until(lambda: group.done(round_no) == 2, 30, "both results", interval=0.01)
            for name in ("A", "B"):
                assert handshake.wait_result(group.folder, name, 5, round_no) == {
                    "name": name, "args": ["x", "y"], "plan": {"k": k}, "env": "seen"}
        if rounds == 2:  # its rounds done, a helper ends by itself
            wait_until(lambda: not any(p.alive() for p in group.procs.values()), 30, "the helpers to end")
        else:
            assert all(p.alive() for p in group.procs.values())
    assert not any(p.alive() for p in group.procs.values())


def test_serve_ends_when_told_to_stop_before_any_go(tmp_path):
    handshake.stop(tmp_path)
    seen = []
    handshake.serve(tmp_path, "A", seen.append, rounds=None, lifetime=5)
    assert seen == [] and (tmp_path / "ready-A").exists()


def test_start_uvicorn_runs_the_app_in_the_given_environment(tmp_path):
    (tmp_path / "envapp.py").write_text(textwrap.dedent("""
        import os

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            body = os.environ.get("LX_MARK", "none").encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
    """))
    import os
    import urllib.request
    proc, port = start_uvicorn("envapp:app", tmp_path, tmp_path / "app.log", env=dict(os.environ, LX_MARK="seen"))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.read() == b"seen"
    finally:
        proc.stop()


def test_signal_group_pauses_and_resumes_the_whole_group(tmp_path):
    import signal

    from shared.proc import Process, proc_stat
    proc = Process([sys.executable, "-c", "import time\nwhile True:\n    time.sleep(0.01)"], cwd=tmp_path,
                   log_path=tmp_path / "p.log")
    try:
        proc.signal_group(signal.SIGSTOP)
        wait_until(lambda: proc_stat(proc.pid)[2] == "T", 10, "the process to stop")
        proc.signal_group(signal.SIGCONT)
        wait_until(lambda: proc_stat(proc.pid)[2] != "T", 10, "the process to go on")
    finally:
        proc.stop(grace=3)
    proc.signal_group(signal.SIGCONT)  # a group that is gone: nothing happens
