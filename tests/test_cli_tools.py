"""doctor and watch, as a learner meets them."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checks import doctor
from shared.manifest import KIT_ROOT


def test_doctor_reports_each_area_and_passes_here():
    from shared import servicectl
    # The kit's own servers, fully started (in a child process: they outlive it): doctor must call them ours.
    subprocess.run([sys.executable, "-m", "shared.servicectl", "up"], cwd=KIT_ROOT, capture_output=True, timeout=300,
                   check=True)
    with servicectl.in_use():  # no lesson may be restarting a server (and its pid file) while doctor looks
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
        ports = {"someone-else": holder.getsockname()[1]}
        level, what, fix = doctor.check_ports(ports, lesson_needs_services=True)  # a learner on lesson 08+
        assert level == doctor.BAD and "held by another program" in what and "ss -ltnp" in fix
        # A learner still on lessons 01–07 does not need the port yet: a warning, not a blocker.
        assert doctor.check_ports(ports, lesson_needs_services=False)[0] == doctor.WARN


def test_doctor_warns_when_the_kit_lives_on_a_windows_drive(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    wsl = "Linux version 5.15.153.1-microsoft-standard-WSL2"
    level, what, fix = doctor.check_wsl(wsl, Path("/mnt/c/Users/me/task-lab"))
    assert level == doctor.WARN and "Windows drive" in what and "git clone" in fix
    assert doctor.check_wsl(wsl, Path("/home/me/task-lab"))[0] == doctor.OK
    assert doctor.check_wsl("Linux version 6.1.0-13-amd64", Path("/mnt/c/x"))[1] == "not WSL"


def test_doctor_warns_of_a_python_whose_process_pool_can_hang(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    level, what, fix = doctor.check_python((3, 11, 2))    # Debian 12's python3
    assert level == doctor.WARN and "gh-94440" in what and "lesson 06" in what and "3.11.4+" in fix
    assert doctor.check_python((3, 11, 4))[0] == doctor.check_python((3, 13, 0))[0] == doctor.OK
    assert doctor.check_python((3, 10, 12))[0] == doctor.BAD


def test_a_full_disk_is_a_one_line_error(monkeypatch, capsys):
    import errno

    from checks import cli
    monkeypatch.setenv("LAB_LANG", "en")

    def fails(errno_value):
        def command(args):
            raise OSError(errno_value, os.strerror(errno_value), "/home/me/task-lab/.state/logs/x.log")
        return command

    monkeypatch.setitem(cli.COMMANDS, "list", fails(errno.ENOSPC))
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on the disk (/home/me/task-lab/.state/logs/x.log)" in err
    monkeypatch.setitem(cli.COMMANDS, "list", fails(errno.EIO))    # any other OSError is still a bug to see
    with pytest.raises(OSError):
        cli.main(["list"])


def test_a_full_disk_is_told_apart_from_other_errors():
    import errno

    from checks.workdir import disk_full
    copying = OSError(errno.ENOSPC, "No space left on device", "/kit/lessons/a.py", None, "/state/work/a.py")
    assert disk_full(copying) == "/state/work/a.py"     # where it was writing, not what it read
    tree = shutil.Error([("/a/x", "/b/x", "[Errno 28] No space left on device: '/a/x' -> '/b/x'")])
    assert disk_full(tree) == "/b/x"
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded")) is not None
    assert disk_full(OSError(errno.ENOSPC, "No space left on device", "notes.py")) != "notes.py"  # says little
    assert disk_full(OSError(errno.EACCES, "Permission denied", "/x")) is None
    assert disk_full(shutil.Error([("/a/x", "/b/x", "[Errno 13] Permission denied")])) is None


def test_a_full_disk_stops_grading_and_blames_no_student(tmp_path, monkeypatch, capsys):
    import errno

    from checks import cli, grade
    monkeypatch.setenv("LAB_LANG", "en")
    folder = tmp_path / "alice" / "tasks_lab"
    folder.mkdir(parents=True)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "state" / "logs" / "box.log"))

    monkeypatch.setattr(grade, "run_many", full)
    assert cli.main(["grade", "--lab", str(folder), "--lessons", "01", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no space left on the disk" in err and "Traceback" not in err and "done alice" not in err
    assert not (tmp_path / "out" / "alice.json").exists()     # no report that says alice's folder failed
    from checks.sandbox import STOP
    assert not STOP.is_set()    # this process may run boxes again (it stopped every later test in it)


def test_on_macos_the_kit_says_it_needs_linux_before_running_anything(monkeypatch, capsys):
    from checks import cli
    monkeypatch.setenv("LAB_LANG", "en")
    monkeypatch.setattr(sys, "platform", "darwin")
    level, what, fix = doctor.check_platform()
    assert level == doctor.BAD and "this is darwin" in what and "Linux VM or container" in fix
    assert cli.main(["run", "01"]) == 2  # before any box, judge (prctl) or /proc is touched
    assert "runs its checks on Linux (WSL2 on Windows)" in capsys.readouterr().err
    assert cli.main(["list"]) == 0  # reading the lessons needs no Linux


def test_no_box_where_one_is_required_is_an_error_that_says_why(monkeypatch, capsys):
    from checks import box, cli
    monkeypatch.setenv("LAB_LANG", "en")
    monkeypatch.setenv("LAB_BOX", "on")
    monkeypatch.setattr(box, "availability", lambda: (False, "bubblewrap cannot create namespaces (test)"))
    assert cli.main(["run", "01"]) == 2
    assert "error: bubblewrap cannot create namespaces (test)" in capsys.readouterr().err


def test_watch_runs_the_checks_and_stops_cleanly_on_ctrl_c(tmp_path):
    lab = KIT_ROOT / "lessons" / "01-accept-202"  # lesson 01 as a learner would have typed it
    proc = subprocess.Popen([sys.executable, "-m", "checks", "watch", "01", "--lab", str(lab), "--interval", "0.2"],
                            cwd=KIT_ROOT,
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


def test_flake_hunt_lists_every_non_pass(tmp_path):
    """The hunt's runs are commands writing a report, as `checks run` does: the second run of 04 has one
    non-pass, and flake.json lists it with its words."""
    import io
    import json as _json

    from checks import flake
    script = ('import json, sys; report, lesson, number = sys.argv[1:]; '
              'bad = lesson == "04" and number == "2"; '
              'open(report, "w").write(json.dumps({"tests": [{"id": lesson + ".1", '
              '"status": "fail" if bad else "pass", '
              '"message": "boom", "output": "evidence"}]}))')
    stream = io.StringIO()
    out = tmp_path / "flake.json"
    code = flake.hunt(["01", "04"], rounds=2, parallel=2, burn=1, out=out, seed=5, stream=stream,
                      command=lambda run, lab: [sys.executable, "-c", script, str(run.report), run.lesson,
                                                str(run.number)])
    assert code == 1
    summary = _json.loads(out.read_text())
    assert summary["check_runs"] == 8 and summary["lesson_runs"] == 8  # 2 rounds × 2 lessons × 2 copies
    assert [(x["lesson"], x["run"], x["message"]) for x in summary["non_passes"]] == [("04", 2, "boom")]
    assert "04.1 fail: boom" in stream.getvalue() and "seed 5" in stream.getvalue()


def _lab_cli(home, *args):
    return subprocess.run([sys.executable, "-m", "checks", *args], cwd=KIT_ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(home)))


def test_check_never_silently_checks_the_reference(tmp_path):
    run = _lab_cli(tmp_path, "check", "01")
    assert run.returncode == 2 and "no folder of yours is known yet" in run.stderr and "make lesson-01" in run.stderr
    assert "passed" not in run.stdout


def test_check_remembers_the_folder_and_chooses_the_lesson(tmp_path):
    lab = tmp_path / "tasks_lab"
    shutil.copytree(KIT_ROOT / "lessons" / "01-accept-202", lab,
                    ignore=shutil.ignore_patterns("verifiers", "README.md"))
    first = _lab_cli(tmp_path / "home", "check", "--lab", str(lab))
    assert first.returncode == 0, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert "remembered your folder" in lines[0] and "checking lesson 01" in lines[1]
    assert f"checking your folder: {lab}" in first.stdout
    (lab / "api_states.py").write_text("")  # broken now; the remembered folder is what `check` checks
    second = _lab_cli(tmp_path / "home", "check")
    assert second.returncode == 1 and "you last passed lesson 01" in second.stdout and str(lab) in second.stdout
    listing = _lab_cli(tmp_path / "home", "list").stdout
    row = listing.splitlines()[1]  # lesson 01, in the same words as the run's summary
    assert f"your folder: {lab}" in listing and "reference last: —; your folder last: 0 passed, 5 failed" in row
    forget = _lab_cli(tmp_path / "home", "check", "--forget")
    assert forget.returncode == 0 and _lab_cli(tmp_path / "home", "check").returncode == 2


def test_reference_runs_say_so_first(tmp_path):
    run = _lab_cli(tmp_path, "run", "01")
    assert run.stdout.splitlines()[0] == "checking the kit's reference files, not your folder"


def test_make_keeps_the_runners_exit_codes_without_its_own_error_line(tmp_path):
    lab = tmp_path / "tasks_lab"
    lab.mkdir()
    (lab / "api_states.py").write_text("")
    env = dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home"))
    failed = subprocess.run(["make", "check", f"LAB={lab}", "LESSON=01"], cwd=KIT_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1 and "make: ***" not in failed.stdout + failed.stderr
    usage = subprocess.run(["make", "check", "LESSON=99"], cwd=KIT_ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert usage.returncode == 2 and "no lesson" in usage.stderr
    shutil.copytree(KIT_ROOT / "lessons" / "01-accept-202", lab, dirs_exist_ok=True)
    passed = subprocess.run(["make", "check", "LESSON=01"], cwd=KIT_ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_help_lists_every_target_and_a_closed_pipe_ends_quietly():
    run = subprocess.run("make help | head -2", shell=True, cwd=KIT_ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "Traceback" not in run.stderr and len(run.stdout.splitlines()) == 2
    full = subprocess.run(["make", "help"], cwd=KIT_ROOT, capture_output=True, text=True, timeout=60).stdout
    makefile = (KIT_ROOT / "Makefile").read_text()
    targets = {line.split(":")[0] for line in makefile.splitlines()
               if re.match(r"^[a-z][a-z-]*(-%)?:", line) and not line.startswith(("venv:", "help:"))}
    missing = [name for name in targets if f"make {name.replace('-%', '-NN')}" not in full]
    assert not missing, missing


# --- one diagnosis per cause (a learner's folder as a whole) ----------------------------------------

def _lesson01_folder(tmp_path):
    lab = tmp_path / "shop-service" / "tasks_lab"
    shutil.copytree(KIT_ROOT / "lessons" / "01-accept-202", lab,
                    ignore=shutil.ignore_patterns("verifiers", "README.md"))
    return lab


def _statuses(run_stdout):
    return [line.split()[1] for line in run_stdout.splitlines() if re.match(r"^  [✓✗!⏱–] \d\d\.\d+", line)]


def test_a_misnamed_file_is_said_once_and_blocks_the_checks(tmp_path):
    lab = _lesson01_folder(tmp_path)
    (lab / "api_states.py").rename(lab / "api_state.py")
    run = _lab_cli(tmp_path / "home", "run", "01", "--lab", str(lab))
    assert run.returncode == 1
    assert f"api_states.py not found in your folder: expected at {lab / 'api_states.py'}" in run.stdout
    assert "is api_state.py the same file, misnamed?" in run.stdout
    assert run.stdout.count("BLOCKED (api_states.py)") == 5 and "Traceback" not in run.stdout


def test_a_syntax_error_points_at_the_learners_own_file_and_line(tmp_path):
    lab = _lesson01_folder(tmp_path)
    source = (lab / "api_states.py").read_text().replace("app = FastAPI(", "app = FastAPI((", 1)
    (lab / "api_states.py").write_text(source)
    run = _lab_cli(tmp_path / "home", "run", "01", "--lab", str(lab))
    assert run.returncode == 1 and f"api_states.py does not compile: {lab / 'api_states.py'}:" in run.stdout
    assert ".state/work" not in run.stdout and run.stdout.count("BLOCKED (api_states.py)") == 5


def test_a_file_shadowing_a_standard_module_is_named(tmp_path):
    lab = _lesson01_folder(tmp_path)
    (lab / "logging.py").write_text("x = 1\n")
    run = _lab_cli(tmp_path / "home", "run", "01", "--lab", str(lab))
    assert f"{lab / 'logging.py'} has the name of Python's logging module" in run.stdout


def test_lab_one_folder_too_high_says_where_the_files_are(tmp_path):
    lab = _lesson01_folder(tmp_path)
    run = _lab_cli(tmp_path / "home", "run", "01", "--lab", str(lab.parent))
    assert run.returncode == 1 and f"point LAB= at {lab}" in run.stdout


def test_one_runtime_cause_is_explained_once(tmp_path):
    lab = _lesson01_folder(tmp_path)
    (lab / "api_states.py").write_text((lab / "api_states.py").read_text() + "\nraise RuntimeError('typo at import')\n")
    run = _lab_cli(tmp_path / "home", "run", "01", "--lab", str(lab))
    assert run.returncode == 1 and run.stdout.count("typo at import") >= 1
    assert run.stdout.count("same cause as 01.1: fix that first") >= 3, run.stdout


def test_ctrl_c_in_make_watch_ends_quietly(tmp_path):
    # As a learner does it: make watch in a terminal, then Ctrl-C — no traceback, no make error line.
    import pty
    lab = _lesson01_folder(tmp_path)
    # make in a terminal of its own: a new session whose controlling terminal is the pty (util-linux's
    # setsid --ctty), started without forking this multi-threaded process by hand (pty.fork).
    fd, terminal = pty.openpty()
    make = subprocess.Popen(["setsid", "--ctty", "make", "watch", "LESSON=01", f"LAB={lab}"], cwd=KIT_ROOT,
                            stdin=terminal, stdout=terminal, stderr=terminal,
                            env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 120
    while b"watching" not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(fd, 4096)
        except OSError:
            break
    assert b"watching" in seen, seen
    os.write(fd, b"\x03")
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    make.wait(timeout=30)
    os.close(fd)
    text = seen.decode(errors="replace")
    assert "stopped watching" in text and "make: ***" not in text and "Traceback" not in text, text


def test_ctrl_c_during_a_check_is_one_line_and_leaves_nothing(tmp_path):
    # Ctrl-C while a box runs: a 30-line KeyboardInterrupt traceback used to follow.
    from shared.proc import wait_until
    from tests.folders import learner_folder
    from tests.orphans import adopting, interrupt_once
    from tests.processes import alive_with
    lab = learner_folder(tmp_path / "lab", "04")
    home = tmp_path / "home"
    with adopting() as left:
        # Without PYTHONUNBUFFERED (a plain shell has none): the kit's lines must reach the pipe as printed.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        check = subprocess.Popen([sys.executable, "-m", "checks", "check", "04", "--lab", str(lab)], cwd=KIT_ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=dict(env, LAB_LANG="en", LAB_HOME=str(home)))
        # ready: a box is running (its command line names this test's work folder)
        output, code = interrupt_once(check, "checking your folder", 60, ready=lambda: alive_with(str(home)))
        wait_until(lambda: not left(), 30, "the boxes to end")
    assert code == 130 and "stopped (Ctrl-C): the checks under way were ended" in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output


def test_a_missing_file_only_an_extension_needs_is_not_a_problem(tmp_path):
    # A folder typed from the course has no asyncio-note scripts (lesson 02's extension): no ✗ line for them.
    lab = tmp_path / "tasks_lab"
    shutil.copytree(KIT_ROOT / "lessons" / "02-asyncio-bounded", lab,
                    ignore=shutil.ignore_patterns("verifiers", "README.md"))
    for path in lab.glob("*.py"):
        if path.name != "bounded_async.py":  # the course's file; the rest are the note's scripts
            path.unlink()
    run = _lab_cli(tmp_path / "home", "run", "02", "--lab", str(lab))
    assert "not found in your folder" not in run.stdout, run.stdout
