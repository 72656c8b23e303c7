"""The verifiers' shared helpers, each with a small test of its own."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from shared import handshake
from shared.events import read_events, short
from shared.credentials import read_env_file
from shared.manifest import KIT_ROOT
from shared.proc import Process, WaitTimeout, is_zombie, kill_pid, proc_stat, wait_all_ready, wait_until


def test_read_events_skips_a_half_written_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "start", "attempt": 0}\n{"kind": "end", "att')  # a writer is mid-line
    assert read_events(path) == [{"kind": "start", "attempt": 0}]
    assert read_events(tmp_path / "missing.jsonl") == []
    path.write_text('[1, 2]\n\n{"kind": "x"}\n')  # not an object, a blank line: skipped
    assert read_events(path) == [{"kind": "x"}]


def test_short_id():
    assert short("0123456789abcdef") == "01234567…"


def test_read_env_file_strips_one_pair_of_quotes_like_dotenv(tmp_path):
    path = tmp_path / ".env.tasks"
    path.write_text("# comment\nA=plain\nB=\"double\"\nC='single'\nexport D=exported\nE=\"it's\"\nnot a pair\n")
    assert read_env_file(path) == {"A": "plain", "B": "double", "C": "single", "D": "exported", "E": "it's"}
    assert read_env_file(tmp_path / "missing") == {}


def test_proc_stat_survives_spaces_and_parentheses_in_the_command_name(tmp_path):
    # prctl-free: exec a copy of python under a name with ') (' in it.
    odd = tmp_path / "a) (b c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        stat = proc_stat(child.pid)
        assert stat is not None and stat[0] == str(child.pid)
        assert stat[2] in "RSD" and stat[3] == str(os.getpid())  # state, then the parent's pid
        assert not is_zombie(child.pid)
    finally:
        child.kill()
        child.wait()
    assert proc_stat(child.pid) is None and is_zombie(child.pid)


def test_living_with_finds_children_and_group_members_and_not_the_dead():
    from shared.proc import living_with
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert child.pid in living_with(3, os.getpid())  # a child of this process
        assert living_with(4, child.pid) == [child.pid]  # alone in the group it leads
    finally:
        child.kill()
    from shared.proc import wait_until
    wait_until(lambda: is_zombie(child.pid), 10, "the killed child to become a zombie", interval=0.01)
    assert child.pid not in living_with(3, os.getpid())  # a zombie until reaped: not living
    child.wait()


def test_handshake_ready_go_result_between_processes(tmp_path):
    helper = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(KIT_ROOT)!r})
        from shared import handshake
        folder = sys.argv[1]
        handshake.ready(folder, "h1")
        plan = handshake.wait_go(folder, "h1", lifetime=30)
        handshake.write_result(folder, "h1", [] if plan["n"] == 0 else list(range(plan["n"])))
    """)
    proc = subprocess.Popen([sys.executable, "-c", helper, str(tmp_path)])
    try:
        handshake.wait_ready(tmp_path, ["h1"], timeout=30)
        handshake.go(tmp_path, ["h1"], {"n": 0})
        assert handshake.wait_result(tmp_path, "h1", timeout=30) == []  # a falsy result still arrives
    finally:
        handshake.stop(tmp_path)
        assert proc.wait(timeout=30) == 0


def test_learner_limits_are_lifted_only_where_a_connect_exists():
    import types

    from shared.handshake import HELPER_LIFETIME
    from shared.learner_limits import wait_while_the_kit_holds

    ran = []

    class Cursor:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql, args=()):
            ran.append((sql, args))

    class Conn:
        _read_timeout = 3

        def cursor(self):
            return Cursor()

        def get_server_info(self):
            return "10.11.6-MariaDB-0+deb12u1"

    module = types.SimpleNamespace(connect=lambda: Conn())
    wait_while_the_kit_holds(module)
    conn = module.connect()
    assert conn._read_timeout is None
    assert ran == [("SET SESSION innodb_lock_wait_timeout = %s", (int(HELPER_LIFETIME),)),
                   ("SET SESSION max_statement_time = 0", ())]
    bare = types.SimpleNamespace()
    wait_while_the_kit_holds(bare)  # a folder without connect keeps its own limits
    assert not hasattr(bare, "connect")


def _run_helper(code: str, *args: str) -> subprocess.CompletedProcess:
    script = f"import sys\nsys.path.insert(0, {str(KIT_ROOT)!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)


def test_hold_gate_pauses_the_first_write_of_a_held_job_until_released(tmp_path):
    from shared.proc import wait_until
    (tmp_path / "hold.txt").write_text("job-1\n")
    helper = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(KIT_ROOT)!r})
        from shared.hold_gate import Gate
        folder = sys.argv[1]
        def record(kind, **fields):
            with open(folder + "/events.jsonl", "a") as out:   # no held id in this path: never pauses
                out.write(json.dumps({{"kind": kind, **fields}}) + "\\n")
        gate = Gate(folder, "t", folder + "/hold.txt", backstop=60.0, record=record)
        gate.hold_first_writes()
        open(folder + "/other.txt", "w").close()    # not held
        open(folder + "/job-1.out", "w").close()    # held: waits for the release
        open(folder + "/job-1.out", "w").close()    # the second write does not wait
    """)
    proc = subprocess.Popen([sys.executable, "-c", helper, str(tmp_path)])
    try:
        wait_until(lambda: [e["kind"] for e in read_events(tmp_path / "events.jsonl")] == ["hold"], 30, "the hold")
        assert proc.poll() is None  # still held
        (tmp_path / "t-release-job-1").touch()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    events = read_events(tmp_path / "events.jsonl")
    assert [(e["kind"], e["job"], e.get("released")) for e in events] == [("hold", "job-1", None),
                                                                        ("release", "job-1", True)]


def test_hold_gate_reads_phase_lists(tmp_path):
    from shared.hold_gate import read_list
    (tmp_path / "hold.txt").write_text("claim a\nsend b\nclaim c\nbroken line here\n")
    assert read_list(str(tmp_path / "hold.txt"), "claim") == ["a", "c"]
    assert read_list(str(tmp_path / "missing.txt")) == []


def test_worker_events_record_each_run_of_the_chosen_task():
    done = _run_helper("""
        import json
        from celery import signals
        from shared.worker_events import record_task_runs
        seen = []
        record_task_runs(lambda kind, **f: seen.append({"kind": kind, **f}), only="demo",
                         started=lambda task, args, kwargs: {"first": args[0]},
                         retried=lambda task, request, reason: {"why": str(reason)})
        class Task:
            def __init__(self, name): self.name = name
        class Request:
            id = "t-1"
        demo, other = Task("demo"), Task("other")
        for task in (demo, other):
            signals.task_prerun.send(sender=task, task_id="t-1", task=task, args=("job", 2), kwargs={})
            signals.task_retry.send(sender=task, request=Request(), reason="later")
            signals.task_postrun.send(sender=task, task_id="t-1", task=task, state="SUCCESS", retval=object())
        print(json.dumps(seen))
    """)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert [e["kind"] for e in seen] == ["start", "retry", "end"]  # "other" is not recorded
    assert seen[0] == {"kind": "start", "task": "demo", "task_id": "t-1", "args": ["job", 2], "kwargs": {},
                       "first": "job"}
    assert seen[1]["why"] == "later" and seen[1]["task_id"] == "t-1"
    assert seen[2]["state"] == "SUCCESS" and seen[2]["retval"].startswith("<object object")  # repr, not the object


def test_location_target_follows_only_this_server():
    import httpx2 as httpx
    from shared.location import location_target

    def answer(location):
        request = httpx.Request("POST", "http://testserver/exports")
        return httpx.Response(202, headers={"location": location} if location else {}, request=request)

    assert location_target(answer("/exports/1")) == "http://testserver/exports/1"
    assert location_target(answer("http://testserver/exports/1")) == "http://testserver/exports/1"
    assert location_target(answer("http://elsewhere/exports/1")) is None
    assert location_target(answer("/exports/1?x=1")) is None
    assert location_target(answer(None)) is None


def test_probe_report_travels_whole_in_its_own_file_and_is_read_as_data(tmp_path, monkeypatch):
    from shared import probe_report
    path = probe_report.fresh_path(tmp_path / "logs", "probe-normal")
    # The probe's stdout is shared with the learner's code and its workers; the report is not on it.
    program = "import sys; sys.stderr.write('  File x, line 1, in map\\n    '); " \
              "from shared import probe_report; probe_report.write({'rows': [1, 2], 'when': object()})"
    subprocess.run([sys.executable, "-c", program], cwd=KIT_ROOT, check=True, timeout=60,
                   env={**os.environ, probe_report.REPORT_ENV: str(path)}, stderr=subprocess.DEVNULL)
    report = probe_report.read(path)
    assert report["rows"] == [1, 2] and report["when"].startswith("<object")
    assert not path.with_name(path.name + ".partial").exists()
    # a rerun starts empty
    assert probe_report.fresh_path(tmp_path / "logs", "probe-normal") == path and not path.exists()

    assert probe_report.read(path) is None  # no report: the judge says the probe gave none
    path.write_text("[1, 2]")
    assert probe_report.read(path) is None  # not an object
    path.write_bytes(b"{" + b" " * probe_report.REPORT_LIMIT + b"}")
    assert probe_report.read(path) is None  # too big to be a report
    secret = tmp_path / "secret.json"
    secret.write_text('{"passed": true}')
    path.unlink()
    path.symlink_to(secret)
    assert probe_report.read(path) is None  # a link planted in the learner's folder is not followed

    monkeypatch.delenv(probe_report.REPORT_ENV, raising=False)
    with pytest.raises(SystemExit):
        probe_report.write({})


def test_an_old_state_folder_is_used_until_moved_and_never_moved_from_under_a_running_server(tmp_path, capsys):
    from shared.state import move_old, state_root
    assert state_root(tmp_path) == tmp_path / ".state"  # a fresh checkout
    (tmp_path / ".lab" / "services").mkdir(parents=True)
    (tmp_path / ".lab" / "progress.json").write_text("{}")
    assert state_root(tmp_path) == tmp_path / ".lab"  # an old checkout keeps working as it is
    # A private server still runs from .lab/ (this test's own process stands in for it): not moved.
    (tmp_path / ".lab" / "services" / "mysql.pid").write_text(f"{os.getpid()}\n")
    move_old(tmp_path)
    assert state_root(tmp_path) == tmp_path / ".lab" and "services-down" in capsys.readouterr().err
    # Once nothing runs from it, it is moved whole, with a one-line notice, once.
    (tmp_path / ".lab" / "services" / "mysql.pid").write_text("999999999\n")
    move_old(tmp_path)
    assert state_root(tmp_path) == tmp_path / ".state" and (tmp_path / ".state" / "progress.json").is_file()
    assert not (tmp_path / ".lab").exists() and ".state/" in capsys.readouterr().err
    move_old(tmp_path)
    assert capsys.readouterr().err == ""
    # A .lab that is a link is not the kit's: never used, never moved.
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / ".lab").symlink_to(tmp_path / ".state")
    move_old(tmp_path / "fresh")
    assert state_root(tmp_path / "fresh") == tmp_path / "fresh" / ".state"
    assert (tmp_path / "fresh" / ".lab").is_symlink()


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


def test_stop_ends_what_a_process_left_running_when_it_ended_on_its_own(tmp_path):
    # The leader starts a child in its group, says its pid and exits 4: stop() still ends the child.
    code = ("import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " print(child.pid, flush=True); raise SystemExit(4)")
    proc = _printer(tmp_path, "leaver", code)
    wait_until(lambda: not proc.alive(), 30, "the leader to exit")
    child = int(proc.log_text().split()[0])
    assert os.path.exists(f"/proc/{child}") and not is_zombie(child)  # the leader's exit left it running
    assert proc.stop(grace=1) == 4
    wait_until(lambda: not os.path.exists(f"/proc/{child}") or is_zombie(child), 10, "the child to end")
    assert proc.stop() == 4 and not proc.alive()  # stopping again changes nothing


def test_wait_ended_returns_when_the_leader_ends_and_leaves_it_unreaped(tmp_path):
    proc = _printer(tmp_path, "ender", "raise SystemExit(5)")
    proc.wait_ended()
    assert not proc.alive() and proc.popen.returncode is None  # ended, not reaped: its group id is still its own
    assert proc.stop(grace=0) == 5


def test_once_makes_a_run_once_and_raises_its_failure_again_in_every_later_call():
    from shared.tap import once
    made = []

    @once
    def run(kind: str, timeout: float = 1) -> str:
        made.append((kind, timeout))
        assert kind != "broken", "the run gave no report"
        return kind.upper()

    assert run("a") == run("a") == "A" and run("a", timeout=2) == "A"
    for _ in range(2):
        with pytest.raises(AssertionError, match="the run gave no report"):
            run("broken")
    assert made == [("a", 1), ("a", 2), ("broken", 1)]


def test_stopped_holds_one_process_for_the_block_and_continues_it_however_the_block_ends(tmp_path):
    from shared.proc import stopped
    proc = _printer(tmp_path, "sleeper", "import time; time.sleep(60)")
    state = lambda: proc_stat(proc.pid)[2]  # noqa: E731
    try:
        with pytest.raises(RuntimeError), stopped(proc.pid):
            wait_until(lambda: state() == "T", 10, "the process to stop")
            raise RuntimeError("the block failed")
        wait_until(lambda: state() != "T", 10, "the process to run again")
        assert proc.alive()
    finally:
        proc.stop(grace=1)
