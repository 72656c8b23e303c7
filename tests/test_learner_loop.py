"""The learner's loop (issue 23): a diagnosis points at the mistake made, counts add up in the same words
everywhere, a lesson the folder has not reached is said to be not reached, not failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from checks import gradebook, preflight, progress, report
from checks.console import regression_cause
from checks.results import ERROR, FAIL, NOT_REACHED, PASS, SKIPPED, CheckResult, LessonResult
from checks.selection import next_lesson
from checks.session import in_the_learners_terms
from shared import manifest
from tests.folders import learner_folder

DATA = manifest.load()
KIT = manifest.KIT_ROOT


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "checks", *args], cwd=KIT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(home)))


def _lesson01_folder(tmp_path: Path) -> Path:
    return learner_folder(tmp_path / "tasks_lab")


# --- a failure is blocked by a problem only when the problem is its cause ------------------------------

def test_a_missing_file_blocks_only_the_checks_that_fail_for_it():
    missing = preflight.Problem("api_db.py", "api_db.py not found", only_if_blocking=True, kind="missing")
    own_finding = ("at capacity the answer must be 503, got 202\n"
                   "HTTP submit: api_db.py POST /exports; limit L=100, 99 rows present")
    assert preflight.blocked_by([missing], own_finding) is None  # the file is named, but it is not the cause
    assert preflight.blocked_by([missing], "ModuleNotFoundError: No module named 'api_db'") is missing
    assert preflight.blocked_by([missing], "python: can't open file '/x/api_db.py': No such file") is missing
    broken = preflight.Problem("api_states.py", "does not compile", kind="syntax")
    assert preflight.blocked_by([broken], 'File "/x/api_states.py", line 3\nSyntaxError: invalid syntax') is broken
    assert preflight.blocked_by([broken], "module 'api_states' has no attribute 'app'") is None


# --- counts: one set of words ---------------------------------------------------------------------------

def _check(status: str, regression: bool = False) -> CheckResult:
    return CheckResult(lesson="09", id="09.1", kind="core", text={"en": "x", "zh": "x"}, hint={"en": "", "zh": ""},
                       points=1, status=status, regression=regression)


def test_counts_say_passed_failed_not_attempted_not_reached_and_regressions_apart():
    checks = [_check(PASS)] * 5 + [_check(SKIPPED)] + [_check(PASS, True), _check(FAIL, True)]
    n = report.count_checks(checks)
    assert n == {"passed": 5, "failed": 0, "not_attempted": 1, "not_reached": 0, "regressions": 2,
                 "regressions_passed": 1, "regressions_skipped": 0, "regressions_not_reached": 0, "superseded": 0}
    assert report.count_text(n, "en") == "5 passed, 1 not attempted; regressions: 1 of 2 passed"
    assert report.count_text(n, "zh") == "通过 5 项，未尝试 1 项；回归：运行的 2 项中通过 1 项"
    assert report.count_text(report.count_checks([_check(ERROR), _check(NOT_REACHED)]), "en") == \
        "0 passed, 1 failed, 1 not reached"
    lesson = LessonResult(manifest.lesson("09", DATA), "x", [_check(NOT_REACHED)] * 3, 0.0)
    assert lesson.status == NOT_REACHED


def test_a_lesson_not_reached_is_said_so_everywhere_in_the_same_words(tmp_path):
    """A lesson-01 folder checked on lessons 01 and 02: 02 is not reached (not run, not failed) in the
    terminal, the JSON, make list and the HTML page, with the folder's place named."""
    lab = _lesson01_folder(tmp_path)
    run = _cli(tmp_path / "home", "run", "01", "02", "--lab", str(lab), "--report", str(tmp_path / "r.json"),
               "--html", str(tmp_path / "r.html"))
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "5 passed (" in out and "NOT REACHED" in out and "○ 02.1" in out
    assert "your folder's files reach lesson 01: the files lesson 02 adds (bounded_async.py" in out
    assert out.count("the files lesson 02 adds") == 1  # said once, not once per check
    assert "total: 5 passed, " in out and " not reached; score 5/" in out
    r = json.loads((tmp_path / "r.json").read_text())
    lesson02 = next(lesson for lesson in r["lessons"] if lesson["id"] == "02")
    assert lesson02["status"] == NOT_REACHED and lesson02["counts"]["failed"] == 0
    assert lesson02["counts"]["not_reached"] == len(manifest.lesson("02", DATA)["checks"])
    assert r["counts"]["passed"] == 5
    page = (tmp_path / "r.html").read_text()
    assert report.count_text(lesson02["counts"], "en") in page
    listing = _cli(tmp_path / "home", "list").stdout
    assert "(none remembered yet" in listing  # run, not check: the folder is not remembered
    check = _cli(tmp_path / "home", "check", "01", "--lab", str(lab))
    assert check.returncode == 0
    listing = _cli(tmp_path / "home", "list").stdout
    assert "your folder last: 5 passed" in listing.splitlines()[1]


def test_a_lesson_asked_for_by_name_runs_and_says_where_the_folder_is(tmp_path):
    lab = _lesson01_folder(tmp_path)
    run = _cli(tmp_path / "home", "run", "04", "--lab", str(lab))
    assert run.returncode == 1
    assert "your folder's files reach lesson 01: the files lesson 04 adds (threaded_queue.py) are not in it yet" \
        in run.stdout


def test_the_gradebook_shows_a_lesson_not_reached_in_grey():
    tests = [{"id": "04.1", "status": "not_reached", "regression": False, "message": "…"}]
    assert gradebook.not_reached({"id": "04", "score": 0}, tests)


# --- a regression names this lesson's changes; kit files are the kit's ---------------------------------

def test_a_failed_regression_names_the_changes_of_this_lesson_not_an_earlier_file():
    text = regression_cause(manifest.lesson("12", DATA), "11")
    assert "lesson 11's check" in text and "a change you made for lesson 12 (state_store.py" in text


def test_paths_of_the_kits_own_files_in_the_copy_are_not_called_the_learners(tmp_path):
    work, lab = tmp_path / "work" / "11", tmp_path / "tasks_lab"
    check = _check(FAIL)
    check.message = f'File "{work}/lab11_fixture.py", line 9, in claim_all\nFile "{work}/state_store.py", line 3'
    result = LessonResult(manifest.lesson("11", DATA), str(lab), [check], 0.0)
    in_the_learners_terms(result, [], {work: lab})
    assert str(KIT / "lessons") in check.message and f"{lab}/lab11_fixture.py" not in check.message
    assert f"{lab}/state_store.py" in check.message


# --- one cause, said once; a broken .env.tasks is said, not silently ignored -----------------------------

def test_one_known_cause_is_said_once_and_the_checks_it_broke_wait_behind_it():
    texts = ["the server is MariaDB, which has no max_execution_time: change that line in connect() …",
             "these URLs were not refused … [('real', 'OperationalError')]"]
    [cause] = preflight.causes_seen(texts, "11")
    assert cause.file == "state_store.py" and "max_statement_time = 3" in cause.message
    assert all(preflight.blocked_by([cause], text) is cause for text in texts)
    assert preflight.blocked_by([cause], "at capacity the answer must be 503, got 202") is None
    assert preflight.causes_seen(["at capacity the answer must be 503, got 202"], "11") == []
    assert preflight.causes_seen(texts, "08") == []  # said only where its words fit


def test_a_broken_env_file_in_the_folder_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    lesson = manifest.lesson("11", DATA)
    (tmp_path / ".env.tasks").write_text("CELERY_BROKER_URL=redis://x\nDATABASE_URL mysql://oops\n")
    notice = preflight.env_file_notice(lesson, tmp_path)
    assert notice and "line 2 is not KEY=value" in notice and "never use it" in notice
    (tmp_path / ".env.tasks").write_text("CELERY_BROKER_URL=a\nCELERY_RESULT_BACKEND=b\nDATABASE_URL=c\n")
    assert preflight.env_file_notice(lesson, tmp_path) is None
    assert preflight.env_file_notice(manifest.lesson("01", DATA), tmp_path) is None  # no services: not read


# --- where am I: the folder says, not the last run ------------------------------------------------------

def test_the_lesson_you_are_on_is_the_one_your_files_reach_not_an_earlier_failed_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    for lesson_id in ("01", "02", "03"):
        for name in manifest.lesson(lesson_id, DATA)["files"]:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text("")
    history = {"01": {"status": "pass"}, "02": {"status": "fail"}, "03": {"status": "fail"}}
    monkeypatch.setattr(progress, "load", lambda source="reference": history)
    assert next_lesson(DATA, tmp_path) == ("03", "your folder's files reach lesson 03")
    history["03"] = {"status": "pass"}
    assert next_lesson(DATA, tmp_path)[0] == "03"
    assert "you last passed lesson 03" in next_lesson(DATA, tmp_path)[1]


# --- pictures of a failed check show the failure at a glance ------------------------------------------

def test_a_failed_table_row_is_marked_and_a_peak_past_the_limit_is_drawn():
    from checks import timelines
    from shared import figures
    fig = figures.clean(figures.table({"en": "matrix"}, ["case", "result"], [["a", "pass"], ["b", "fail"]],
                                      failed=[1, 7, "x"]))
    assert fig["failed"] == [1]
    html = timelines.render_table(fig, "en")
    assert html.count('class="failed"') == 1 and "figscroll" in html
    steps = figures.clean(figures.steps({"en": "queued+running"}, [(0, 0), (0.1, 99), (0.2, 101)], limit=100))
    svg = timelines.render_steps(steps, "en")
    assert "peak 101 &gt; limit 100" in svg or "peak 101 > limit 100" in svg
    assert ">95<" in svg  # the axis starts just below the limit, so one past it is seen


def test_two_checks_at_once_each_read_their_own_copy(tmp_path):
    """Lessons checked side by side on one .state/ (a check beside a watch, parallel tests): each run takes the
    folder in to a copy of its own, so none sees another's copy removed under it (seen as false BLOCKED lines
    when parallel runs shared one)."""
    lab = learner_folder(tmp_path / "tasks_lab", "03")
    runs = [subprocess.Popen([sys.executable, "-m", "checks", "run", lesson_id, "--lab", str(lab)], cwd=KIT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
            for lesson_id in ("01", "02", "03")]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    assert not list((tmp_path / "home" / "intake" / "lab").iterdir())  # each copy gone with its run
