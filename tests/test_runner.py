"""Unit tests of the runner itself: TAP parsing, overlay order, statuses, reports, CLI exit codes."""

import json
import os
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checks import cli, progress, report
from checks.results import ERROR, FAIL, PASS, SKIPPED, TIMEOUT, parse_tap
from checks.runner import run_lesson
from checks.watch import folder_signature
from checks.workdir import materialise
from shared import manifest
from tests.processes import alive_with, marker


def _check(cid, verifier="verify_fake.py", timeout=10, kind="core"):
    return {"id": cid, "kind": kind, "text": {"zh": f"检查 {cid}", "en": f"check {cid}"}, "verifier": verifier,
            "points": 1, "timeout": timeout, "hint": {"zh": "提示", "en": "hint"}}


def _lesson(tmp_path, lesson_id, files, verifier_code=None, checks=None, processes=None):
    folder = tmp_path / "kit" / f"{lesson_id}-x"
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    if verifier_code is not None:
        (folder / "verifiers").mkdir(parents=True, exist_ok=True)
        (folder / "verifiers" / "verify_fake.py").write_text(textwrap.dedent(verifier_code))
    return {"id": lesson_id, "slug": "x", "folder": str(folder), "status": "ready",
            "title": {"zh": "课", "en": "lesson"}, "group": {"zh": "组", "en": "group"},
            "checks": checks or [_check(f"{lesson_id}.1")], "processes": processes or []}


# --- TAP parsing ---------------------------------------------------------------------------------

def test_parse_tap_statuses_notes_and_seconds():
    out = textwrap.dedent("""\
        some noise
        ok 1 - 01.1 first
        # evidence line
        # seconds: 0.250
        not ok 2 - 01.2 second
        # expected 202, got 200
        # seconds: 0.1
        ok 3 - 01.3 third # SKIP exercise not attempted
        # seconds: 0.0
        ok 4 - 01.2 reported twice
        1..4
        """)
    found = parse_tap(out)
    assert found["01.1"] == {"status": PASS, "message": "", "notes": ["evidence line"], "seconds": 0.25}
    assert found["01.2"]["status"] == FAIL and found["01.2"]["notes"] == ["expected 202, got 200"]
    assert found["01.3"]["status"] == SKIPPED and found["01.3"]["message"] == "exercise not attempted"
    assert set(found) == {"01.1", "01.2", "01.3"}


def test_parse_tap_ignores_comments_after_ordinary_output():
    found = parse_tap("ok 1 - 02.10 ten\nprinted by a script\n# not a note of 02.10\n")
    assert found["02.10"]["notes"] == []


# --- overlay -------------------------------------------------------------------------------------

def test_overlay_later_lesson_replaces_earlier_file_and_verifiers_are_laid_over(tmp_path):
    one = _lesson(tmp_path, "01", {"a.py": "one", "keep.py": "kept", "README.md": "guide", "pkg/m.py": "m1"},
                  "print('v1')")
    two = _lesson(tmp_path, "02", {"a.py": "two", "pkg/m.py": "m2"}, "print('v2')")
    dest = materialise([one, two], two, tmp_path / "work")
    assert (dest / "a.py").read_text() == "two"
    assert (dest / "keep.py").read_text() == "kept"
    assert (dest / "pkg" / "m.py").read_text() == "m2"
    assert (dest / "verify_fake.py").read_text() == "print('v2')"
    assert not (dest / "README.md").exists() and not (dest / "verifiers").exists()
    only_one = materialise([one, two], one, tmp_path / "work")  # emptied first: no leftovers of 02
    assert (only_one / "a.py").read_text() == "one" and (only_one / "verify_fake.py").read_text() == "print('v1')"


def test_lab_copy_skips_environments(tmp_path):
    lab = tmp_path / "tasks_lab"
    (lab / ".venv" / "bin").mkdir(parents=True)
    (lab / "__pycache__").mkdir()
    (lab / "api_states.py").write_text("learner")
    lesson = _lesson(tmp_path, "01", {"api_states.py": "reference"}, "print()")
    dest = materialise([lesson], lesson, tmp_path / "work", lab=lab)
    assert (dest / "api_states.py").read_text() == "learner"
    assert not (dest / ".venv").exists() and not (dest / "__pycache__").exists()


# --- statuses ------------------------------------------------------------------------------------

def _run(tmp_path, lesson):
    work = materialise([lesson], lesson, tmp_path / "work")
    return {c.id: c for c in run_lesson(lesson, work, tmp_path / "logs").checks}


def test_crash_before_reporting_is_error_never_pass(tmp_path):
    lesson = _lesson(tmp_path, "01", {}, "raise RuntimeError('boom')", [_check("01.1"), _check("01.2")])
    results = _run(tmp_path, lesson)
    assert {c.status for c in results.values()} == {ERROR}
    assert any("boom" in n for n in results["01.1"].notes)


def test_unreported_check_is_error(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            pass
        raise SystemExit(tap.finish())
    """
    results = _run(tmp_path, _lesson(tmp_path, "01", {}, code, [_check("01.1"), _check("01.2")]))
    assert results["01.1"].status == PASS and results["01.2"].status == ERROR


def test_ok_lines_with_failing_exit_are_not_trusted(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            pass
        raise SystemExit(3)
    """
    assert _run(tmp_path, _lesson(tmp_path, "01", {}, code))["01.1"].status == ERROR


def test_timeout_is_timeout_and_stops_the_verifiers_servers(tmp_path):
    code = """
        import sys, time
        from shared.proc import Process
        from shared.tap import Tap, main_guard
        def main(tap):
            with tap.check("01.1"):
                pass
            child = Process([sys.executable, "-c", "import time; time.sleep(60)  # MARK"], ".", "child.log")
            time.sleep(60)
        main_guard(main)
    """.replace("MARK", mark := marker())
    lesson = _lesson(tmp_path, "01", {}, code, [_check("01.1", timeout=1.5), _check("01.2", timeout=1.5)])
    results = _run(tmp_path, lesson)
    assert results["01.1"].status == PASS and results["01.2"].status == TIMEOUT
    assert alive_with(mark) == []


def test_a_hung_check_costs_only_itself_and_leaves_nothing_running(tmp_path):
    # 01.2 hangs with a daemon of its own (a new session, double-forked: outside the verifier's group).
    # 01.2 is TIMEOUT on its own limit; the verifier starts again and 01.3 still passes; nothing is left.
    code = """
        import os, subprocess, sys, time
        from shared.tap import Tap, main_guard
        def main(tap):
            for cid in ("01.1", "01.2", "01.3"):
                with tap.check(cid) as c:
                    c.skip_unless_selected()
                    if cid == "01.2":
                        subprocess.Popen([sys.executable, "-c", "import os, time; time.sleep(120)  # MARK"],
                                         start_new_session=True)
                        time.sleep(120)
        main_guard(main)
    """.replace("MARK", mark := marker())
    checks = [_check("01.1", timeout=30), _check("01.2", timeout=2), _check("01.3", timeout=30)]
    results = _run(tmp_path, _lesson(tmp_path, "01", {}, code, checks))
    assert [results[c].status for c in ("01.1", "01.2", "01.3")] == [PASS, TIMEOUT, PASS]
    assert "2s" in results["01.2"].message
    assert alive_with(mark) == []


def test_a_kit_script_that_learner_code_stopped_is_ended_at_its_limit(tmp_path):
    # The hung-imports probe imports learner modules, and a module may stop the probe itself (SIGSTOP to its
    # parent; as root, a ptrace attach does the same): the run of such a script ends at its limit, nothing left.
    from checks.sandbox import SCRIPT_OVERRAN, run_script
    lesson = _lesson(tmp_path, "01", {}, "")
    work = tmp_path / "work"
    work.mkdir()
    (work / "stops_itself.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n")
    mark = marker()
    assert run_script(lesson, work, tmp_path / "logs", ["stops_itself.py", mark], limit=2) == SCRIPT_OVERRAN
    assert alive_with(mark) == []


def test_a_finding_that_knows_its_cause_brings_that_causes_hint(tmp_path):
    # A check can fail for several reasons; the hint in tasks.json is written for its usual one.  A finding
    # raised as Because(message, hint) shows its own hint instead; a plain assert keeps the check's.
    code = """
        from shared.tap import Because, Tap, main_guard
        def main(tap):
            with tap.check("01.1"):
                raise Because("the URL is redis://…@127.0.0.1:6379/0", "use port 6384, the separate broker")
            with tap.check("01.2"):
                assert False, "plain finding"
        main_guard(main)
    """
    results = _run(tmp_path, _lesson(tmp_path, "01", {}, code, [_check("01.1"), _check("01.2")]))
    assert results["01.1"].status == FAIL and results["01.1"].message == "the URL is redis://…@127.0.0.1:6379/0"
    assert results["01.1"].hint == dict.fromkeys(("zh", "en"), "use port 6384, the separate broker")
    assert results["01.2"].status == FAIL and results["01.2"].hint == {"zh": "提示", "en": "hint"}


def test_verifier_never_runs_optimised(tmp_path, monkeypatch):
    # With PYTHONOPTIMIZE the verifier's asserts would vanish and a failing check would pass.
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    code = """
        from shared.tap import Tap, main_guard
        def main(tap):
            with tap.check("01.1"):
                assert False, "really failed"
        main_guard(main)
    """
    results = _run(tmp_path, _lesson(tmp_path, "01", {}, code))
    assert results["01.1"].status == FAIL and "really failed" in results["01.1"].message


def test_verifier_refuses_dash_o(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "verify_fake.py"
    script.write_text("from shared.tap import main_guard\nmain_guard(lambda tap: None)\n")
    run = subprocess.run([sys.executable, "-O", str(script)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(manifest.KIT_ROOT), LAB_LANG="en"))
    assert run.returncode == 2 and "optimised" in run.stdout


def test_failed_assert_and_unexpected_exception_fail_with_reason(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            assert 1 == 2, "expected one to be two"
        with tap.check("01.2"):
            {}["missing"]
        with tap.check("01.3") as c:
            c.skip("exercise not attempted")
        raise SystemExit(tap.finish())
    """
    results = _run(tmp_path, _lesson(tmp_path, "01", {}, code, [_check("01.1"), _check("01.2"), _check("01.3")]))
    assert results["01.1"].status == FAIL and results["01.1"].message == "expected one to be two"
    assert results["01.2"].status == FAIL and "KeyError" in results["01.2"].message
    assert results["01.3"].status == SKIPPED


def test_declared_processes_start_before_and_stop_after(tmp_path):
    code = """
        import os, pathlib
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            log = pathlib.Path(os.environ["TASKLAB_PROC_HELPER_LOG"]).read_text()
            assert "ready" in log
            pid = int(log.split()[-1])
            assert pid == int(os.environ["TASKLAB_PROC_HELPER_PID"])
            os.kill(pid, 0)
        raise SystemExit(tap.finish())
    """
    mark = marker()
    helper = {"name": "helper", "argv": ["{python}", "-c",
                                         "import os, time; print('ready', os.getpid(), flush=True); "
                                         f"time.sleep(60)  # {mark}"],
              "ready": {"log": "ready"}, "ready_timeout": 10}
    lesson = _lesson(tmp_path, "01", {}, code, processes=[helper])
    assert _run(tmp_path, lesson)["01.1"].status == PASS
    assert alive_with(mark) == []


TERM_TELLER = ("import signal, sys, time\n"
               "def heard(*_):\n    print('TERM heard', flush=True)\n    sys.exit(0)\n"
               "signal.signal(signal.SIGTERM, heard)\nprint('ready', flush=True)\ntime.sleep(60)\n")


@pytest.mark.parametrize("box", ["on", "off"])
def test_once_every_verdict_is_given_a_box_kills_what_runs_and_bare_runs_stop_it_warmly(tmp_path, monkeypatch, box):
    # After the last verdict nothing is judged: in a box (thrown away whole, servers and all) the lesson's
    # processes and those the verifier started are killed at once, no warm shutdown waited for.  Bare, on
    # the kit's shared servers, they still get TERM first (a worker gives back the messages it holds).
    from checks import box as B
    if box == "on" and not B.availability()[0]:
        pytest.skip(B.availability()[1])
    monkeypatch.setenv("LAB_BOX", box)
    # shared.tap.run checks its table against tasks.json: the verifier is lesson 01's by name, with its ids.
    ids = [c["id"] for c in manifest.lesson("01")["checks"]]
    code = """
        import os, sys
        from pathlib import Path
        from shared.proc import Process
        from shared.tap import Check, run
        own = []
        def prove(c):
            own.append(Process([sys.executable, "-c", TELLER], ".", Path(os.environ["TASKLAB_LOG_DIR"]) / "own.log"))
            own[0].wait_ready(20, log_contains="ready")
        def teardown():
            for proc in own:
                proc.stop(grace=20)
        run([Check(i, prove if i == "01.1" else lambda c: None) for i in IDS], teardown=teardown)
    """.replace("TELLER", repr(TERM_TELLER)).replace("IDS", repr(ids))
    helper = {"name": "helper", "argv": ["{python}", "-c", TERM_TELLER], "ready": {"log": "ready"}, "ready_timeout": 20}
    lesson = _lesson(tmp_path, "01", {}, None, [_check(i, "lab01_verify.py") for i in ids], processes=[helper])
    (Path(lesson["folder"]) / "verifiers").mkdir(parents=True)
    (Path(lesson["folder"]) / "verifiers" / "lab01_verify.py").write_text(textwrap.dedent(code))
    result = _run(tmp_path, lesson)["01.1"]
    assert result.status == PASS, (result.message, result.notes)
    for log in ("helper.log", "own.log"):
        heard = "TERM heard" in (tmp_path / "logs" / log).read_text()
        assert heard == (box == "off"), (log, box)


def test_process_that_never_gets_ready_makes_every_check_error(tmp_path):
    helper = {"name": "helper", "argv": ["{python}", "-c", "raise SystemExit(4)"], "ready": {"log": "ready"}}
    lesson = _lesson(tmp_path, "01", {}, "print()", processes=[helper])
    result = _run(tmp_path, lesson)["01.1"]
    assert result.status == ERROR and "exited with 4" in result.message


# --- reports -------------------------------------------------------------------------------------

def test_reports_one_record_per_check(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            pass
        with tap.check("01.2"):
            assert False, "nope"
        with tap.check("01.4"):
            pass
        raise SystemExit(tap.finish())
    """
    checks = [_check("01.1"), _check("01.2"), _check("01.3"), _check("01.4", kind="extension")]
    lesson = _lesson(tmp_path, "01", {}, code, checks)
    work = materialise([lesson], lesson, tmp_path / "work")
    result = run_lesson(lesson, work, tmp_path / "logs")
    report.write_json(tmp_path / "r.json", [result], "reference")
    report.write_junit(tmp_path / "r.xml", [result], "reference")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["status"] == "fail" and data["score"] == 1 and data["max_score"] == 3
    assert data["bonus"] == 1 and data["max_bonus"] == 1  # an extension is scored apart, never in max_score
    assert [(t["id"], t["status"]) for t in data["tests"]] == [("01.1", "pass"), ("01.2", "fail"), ("01.3", "error"),
                                                                ("01.4", "pass")]
    assert [t["bonus"] for t in data["tests"]] == [False, False, False, True]
    assert data["tests"][1]["message"] == "nope" and data["tests"][1]["hint"] == {"zh": "提示", "en": "hint"}
    assert data["tests"][0]["hint"] is None
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("tests") == "4" and suite.get("failures") == "1" and suite.get("errors") == "1"
    assert any(case.get("name").endswith("(extension: bonus)") for case in suite.iter("testcase"))


def test_output_is_capped(tmp_path):
    from checks.results import OUTPUT_CAP, CheckResult
    check = CheckResult("01", "01.1", "core", {}, {}, 1, notes=["x" * 2000])
    assert len(check.output) == OUTPUT_CAP


# --- command line --------------------------------------------------------------------------------

def test_unknown_lesson_and_missing_lab_exit_2(tmp_path, capsys):
    assert cli.main(["run", "99"]) == 2
    assert "99" in capsys.readouterr().err
    assert cli.main(["run", "01", "--lab", str(tmp_path / "nope"), "--report", str(tmp_path / "r.json")]) == 2
    assert "nope" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "error"


def test_bad_usage_exits_2():
    assert cli.main(["frobnicate"]) == 2


def test_malformed_manifest_exits_2(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "tasks.json"
    bad.write_text('{"lessons": [{"id": "1"}]}')
    monkeypatch.setattr(manifest, "MANIFEST", bad)
    assert cli.main(["list"]) == 2
    assert "two digits" in capsys.readouterr().err
    bad.write_text("{not json")
    assert cli.main(["run", "01"]) == 2


def test_progress_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS", tmp_path / "progress.json")
    code = ("from shared.tap import Tap\ntap = Tap()\nwith tap.check('01.1'):\n    pass\n"
            "raise SystemExit(tap.finish())\n")
    lesson = _lesson(tmp_path, "01", {}, code)
    work = materialise([lesson], lesson, tmp_path / "work")
    progress.record([run_lesson(lesson, work, tmp_path / "logs")])
    assert progress.load()["01"]["status"] == "pass" and progress.load()["01"]["passed"] == 1
    assert progress.load("/some/learner") == {}  # the reference's results are never a learner's


def test_watch_signature_sees_a_saved_file(tmp_path):
    (tmp_path / "a.py").write_text("one")
    before = folder_signature(tmp_path)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "ignored.py").write_text("x")
    assert folder_signature(tmp_path) == before
    (tmp_path / "a.py").write_text("two!")
    assert folder_signature(tmp_path) != before


def test_an_assert_inside_learner_code_is_reported_as_such(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        with tap.check("01.1"):
            import learner
        raise SystemExit(tap.finish())
    """
    lesson = _lesson(tmp_path, "01", {"learner.py": "assert 1 + 1 == 3, 'learner sum'\n"}, code)
    result = _run(tmp_path, lesson)["01.1"]
    assert result.status == FAIL and "unexpected error: AssertionError: learner sum" in result.message
    assert any("learner.py" in note for note in result.notes)


# --- focused runs (mutant tests) -----------------------------------------------------------------

def test_only_runs_the_selected_checks_and_skips_the_rest(tmp_path):
    code = """
        from shared.tap import Tap
        tap = Tap()
        for cid in ("01.1", "01.2"):
            with tap.check(cid) as c:
                c.skip_unless_selected()
                assert cid != "01.2", "01.2 ran"
        raise SystemExit(tap.finish())
    """
    lesson = _lesson(tmp_path, "01", {}, code, [_check("01.1"), _check("01.2")])
    work = materialise([lesson], lesson, tmp_path / "work")
    results = {c.id: c for c in run_lesson(lesson, work, tmp_path / "logs", only={"01.1"}).checks}
    assert results["01.1"].status == PASS
    assert results["01.2"].status == SKIPPED  # it would have failed had it run
    with pytest.raises(ValueError):
        run_lesson(lesson, work, tmp_path / "logs", only={"01.9"})


def test_only_runs_that_include_an_exclusive_check_run_alone():
    from checks.servers import needs_exclusive
    lesson = {"exclusive_services": True, "checks": [{"id": "11.1", "exclusive": True}, {"id": "11.2"}]}
    assert needs_exclusive(lesson) and needs_exclusive(lesson, {"11.1", "11.2"})
    assert not needs_exclusive(lesson, {"11.2"})
    assert needs_exclusive({"exclusive_services": True, "checks": [{"id": "12.1"}]}, {"12.1"})
    assert not needs_exclusive({"checks": [{"id": "01.1", "exclusive": True}]})
