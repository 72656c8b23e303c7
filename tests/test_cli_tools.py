"""doctor and watch, as a learner meets them."""

import os
import signal
import socket
import subprocess
import sys
import time

from checks import doctor
from shared.manifest import KIT_ROOT


def test_doctor_reports_each_area_and_passes_here():
    from shared import labctl
    # The kit's own servers, fully started (in a child process: they outlive it): doctor must call them ours.
    subprocess.run([sys.executable, "-m", "shared.labctl", "up"], cwd=KIT_ROOT, capture_output=True, timeout=300,
                   check=True)
    with labctl.in_use():  # no lesson may be restarting a server (and its pid file) while doctor looks
        run = subprocess.run([sys.executable, "-m", "checks", "doctor"], cwd=KIT_ROOT, capture_output=True,
                             text=True, env=dict(os.environ, LAB_LANG="en"), timeout=60)
    assert run.returncode == 0, run.stdout
    for word in ("Python", ".venv", "pinned packages", "WSL", "ports 6384/3307", "disk free"):
        assert word in run.stdout


def test_doctor_names_the_fix_for_a_port_held_by_another_program(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        monkeypatch.setattr(doctor, "SERVICE_PORTS", {"someone-else": holder.getsockname()[1]})
        level, what, fix = doctor.check_ports()
    assert level == doctor.BAD and "held by another program" in what and "ss -ltnp" in fix


def test_doctor_warns_when_the_kit_lives_on_a_windows_drive(monkeypatch, tmp_path):
    version = tmp_path / "version"
    version.write_text("Linux version 5.15.153.1-microsoft-standard-WSL2")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(version if p == "/proc/version" else p, *a, **k))
    monkeypatch.setattr(doctor, "KIT_ROOT", doctor.KIT_ROOT.__class__("/mnt/c/Users/me/task-lab"))
    monkeypatch.setenv("LAB_LANG", "en")
    level, what, fix = doctor.check_wsl()
    assert level == doctor.WARN and "Windows drive" in what and "git clone" in fix


def test_watch_runs_the_checks_and_stops_cleanly_on_ctrl_c(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "checks", "watch", "01", "--interval", "0.2"], cwd=KIT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path)))
    deadline = time.monotonic() + 60
    seen = ""
    while "watching" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "01.1" in seen and "watching" in seen, seen
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped watching" in out


def test_flake_hunt_lists_every_non_pass_and_stops_its_burners(tmp_path, monkeypatch):
    import json as _json

    from checks import flake
    calls = []

    def fake_run(lesson_id, slot, home, report):
        calls.append((lesson_id, slot))
        status = "fail" if len(calls) == 2 else "pass"  # the second run of four has one non-pass
        return [{"id": f"{lesson_id}.1", "status": status, "message": "boom", "output": "evidence"}], 0.1, ""

    monkeypatch.setattr(flake, "_one_run", fake_run)
    started = []
    real_burners = flake._burners
    monkeypatch.setattr(flake, "_burners", lambda n, d: started.extend(real_burners(n, d)) or started)
    out = tmp_path / "flake.json"
    assert flake.hunt(["01", "02"], rounds=2, parallel=2, burn=1, out=out) == 1
    summary = _json.loads(out.read_text())
    assert summary["check_runs"] == 4 and len(summary["non_passes"]) == 1
    assert summary["non_passes"][0]["message"] == "boom"
    assert {slot for _, slot in calls} <= {1, 2}
    assert len(started) == 1 and not started[0].alive()
