"""`make check REPEAT=N`: a series of runs, counted per check; flaky checks first; seeds replay; Ctrl-C
stops cleanly.  The runs here are stand-in commands that write a report the way `checks run` does, so
these tests prove the counting and the stopping; tests/test_repeat_live.py runs real lessons."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checks import repeat
from tests import orphans

KIT_ROOT = Path(__file__).resolve().parent.parent

# A run that writes a report: 04.1 passes on even runs only (a race that luck decides), 04.2 always
# passes, 04.3 always fails; run 5 writes no report at all.
FAKE_RUN = textwrap.dedent("""
    import json, sys
    report, number = sys.argv[1], int(sys.argv[2])
    if number == 5:
        print("Traceback: the runner itself broke"); sys.exit(3)
    flaky = "pass" if number % 2 == 0 else "fail"
    tests = [
        {"id": "04.1", "lesson": "04", "status": flaky, "text": {"en": "counts add up"},
         "message": None if flaky == "pass" else f"counts={{'done': {18 - number % 3}, 'failed': 1}} in 0.{number}s",
         "output": "done 19 failed 1" if flaky == "pass" else "lost an update"},
        {"id": "04.2", "lesson": "04", "status": "pass", "text": {"en": "join returns"}},
        {"id": "04.3", "lesson": "04", "status": "fail", "text": {"en": "work outside the lock"},
         "message": "2 sleeps ran while their thread held mutex"},
    ]
    open(report, "w").write(json.dumps({"tests": tests}))
""")


def fake(run, lab):
    return [sys.executable, "-c", FAKE_RUN, str(run.report), str(run.number)]


def test_a_series_counts_each_check_and_shows_the_flaky_one_first(tmp_path):
    stream = io.StringIO()
    with orphans.adopting() as left:
        series, rows = repeat.repeat(["04"], times=6, parallel=2, burn=1, out=tmp_path, seed=7, command=fake,
                                     stream=stream)
        assert left() == {}  # the burner and every run have ended
    text = stream.getvalue()
    by_id = {row.id: row for row in rows}
    assert by_id["04.1"].kind == "flaky" and sorted(by_id["04.1"].passed) == [2, 4, 6]
    assert sorted(by_id["04.1"].failed) == [1, 3]  # run 5 wrote no report
    # run 5 wrote no report: a check not run there neither passed nor failed every run
    assert by_id["04.2"].kind == "partial" and by_id["04.2"].counts == "passed 5, not run 1 (attempted in 5 of 6 runs)"
    assert by_id["04.3"].kind == "partial" and by_id["04.3"].counts == "failed 5, not run 1 (attempted in 5 of 6 runs)"
    assert by_id["04.*"].failed == [5] and "no report (exit 3)" in text and "the runner itself broke" not in text
    assert rows[0].id == "04.1"  # flaky first
    # one failure, though its numbers differ between runs: both wordings kept, the table says so
    [failure] = by_id["04.1"].failures.values()
    assert failure.runs == [1, 3] and len(failure.wordings) == 2 and "2 wordings" in text
    assert text.index("FLAKY IN YOUR CODE") < text.index("ATTEMPTED IN SOME RUNS ONLY")
    assert "FAILED EVERY RUN" not in text and "PASSED EVERY RUN" not in text
    assert [row.id for row in rows] == ["04.1", "04.3", "04.*", "04.2"]  # those that failed lead their group
    assert "passed 3, failed 2, not run 1 (attempted in 5 of 6 runs)" in text
    assert "evidence: run 1 failed, run 2 passed" in text and "lost an update" in text
    assert "seed 7" in text and "SEED=7" in text and "ETA" in text
    saved = json.loads((tmp_path / "repeat.json").read_text())
    assert saved["seed"] == 7 and saved["finished_runs"] == 6 and saved["checks"][0]["kind"] == "flaky"
    assert {c["id"]: (c["kind"], c["failed"], c["not_run"], c["runs"]) for c in saved["checks"]}["04.3"] == \
        ("partial", 5, 1, 6)
    page = (tmp_path / "index.html").read_text()
    assert "run 1 failed, run 2 passed" in page and "lost an update" in page and "done 19 failed 1" in page
    assert repeat.exit_code(series, rows) == 1


def test_a_steady_folder_passes_every_run_and_exits_zero(tmp_path):
    script = ('import json,sys; open(sys.argv[1],"w").write(json.dumps({"tests": ['
              '{"id": "01.1", "lesson": "01", "status": "pass"}, '
              '{"id": "01.2", "lesson": "01", "status": "skipped"}]}))')
    series, rows = repeat.repeat(["01"], times=4, parallel=2, burn=0, out=tmp_path, seed=1, stream=io.StringIO(),
                                 command=lambda run, lab: [sys.executable, "-c", script, str(run.report)])
    assert [(r.id, r.kind, len(r.passed)) for r in rows] == [("01.1", "passed", 4), ("01.2", "skipped", 0)]
    assert repeat.exit_code(series, rows) == 0


def test_an_unknown_status_or_a_report_out_of_shape_is_never_a_pass(tmp_path):
    script = ('import json,sys; n=int(sys.argv[2]); open(sys.argv[1],"w").write(json.dumps('
              '{"tests": [{"id": "01.1", "status": "passed!"}]} if n == 1 else {"tests": "all good"}))')
    _, rows = repeat.repeat(["01"], times=2, parallel=1, burn=0, out=tmp_path, seed=1, stream=io.StringIO(),
                            command=lambda run, lab: [sys.executable, "-c", script, str(run.report), str(run.number)])
    # each failed in the one run it was in and was not run in the other: never a pass
    assert {(r.id, r.kind, len(r.failed), len(r.passed)) for r in rows} == {("01.1", "partial", 1, 0),
                                                                            ("01.*", "partial", 1, 0)}


def test_the_seed_decides_the_start_order_and_the_burners_places():
    first = [(r.lesson, r.number) for r in repeat.start_order(["01", "02"], 5, seed=42)]
    assert first == [(r.lesson, r.number) for r in repeat.start_order(["01", "02"], 5, seed=42)]
    assert first != [(r.lesson, r.number) for r in repeat.start_order(["01", "02"], 5, seed=43)]
    assert sorted(first) == [(lesson, n) for lesson in ("01", "02") for n in range(1, 6)]
    assert repeat.burner_cpus(3, 42) == repeat.burner_cpus(3, 42)
    cpus = len(os.sched_getaffinity(0))
    assert len(set(repeat.burner_cpus(cpus, 42))) == cpus  # C burners load C different cores


def test_failures_that_differ_only_in_numbers_ids_and_paths_count_as_one():
    key = repeat.message_key
    assert key("job 3f9a1c2b stuck after 1.52s at /tmp/lab-x/slot1/work/") == \
        key("job 77aa00ff stuck after 0.98s at /tmp/lab-y/slot2/work/")
    assert key("counts={'done': 18}") == key("counts={'done': 17}")
    assert key("the job was never claimed") != key("the job was claimed twice")
    assert key("a decade of faded beads") == "a decade of faded beads"  # words are not ids


# ---------------------------------------------------------------- Ctrl-C

HANG_SERIES = textwrap.dedent("""
    import sys
    from pathlib import Path
    from checks import repeat
    # Each run: writes a report after run 1, else starts a grandchild in its group and hangs.  The
    # grandchild, of argv[2]'s kind -- 'plain', or 'deaf': it ignores SIGINT, as one does that was started
    # just as the Ctrl-C reached its group -- holds the run's output open, and says it is there by
    # creating the file REPORT.grandchild.
    grandchild = {"plain": "", "deaf": "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "}[sys.argv[2]]
    grandchild += "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(600)"
    script = ("import json, subprocess, sys, time\\n"
              "if sys.argv[2] == '1':\\n"
              "    open(sys.argv[1], 'w').write(json.dumps({'tests': [{'id': '01.1', 'status': 'pass'}]}))\\n"
              "    sys.exit(0)\\n"
              f"subprocess.Popen([sys.executable, '-c', {grandchild!r}, sys.argv[1] + '.grandchild'])\\n"
              "print('hanging', flush=True); time.sleep(600)\\n")
    series, rows = repeat.repeat(["01"], times=6, parallel=2, burn=1, out=Path(sys.argv[1]), seed=3,
                                 command=lambda run, lab: [sys.executable, "-c", script, str(run.report),
                                                           str(run.number)])
    sys.exit(repeat.exit_code(series, rows))
""")


@pytest.mark.parametrize("grandchild", ["plain", "deaf"])
def test_ctrl_c_stops_the_series_prints_what_was_seen_and_leaves_no_process(tmp_path, grandchild):
    with orphans.adopting() as left:
        proc = subprocess.Popen([sys.executable, "-c", HANG_SERIES, str(tmp_path), grandchild], cwd=KIT_ROOT,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=dict(os.environ, LAB_LANG="en"))
        # Run 1 has finished ("[1/6]") and runs 2 and 3 hang, each with its grandchild there.
        hanging = lambda: len(list((tmp_path / "runs").glob("*.grandchild"))) == 2  # noqa: E731
        out, code = orphans.interrupt_once(proc, "[1/6]", timeout=60, ready=hanging)
        assert code == 130, out
        assert "stopping" in out and "stopped after 1 of 6 runs" in out and "01.1" in out
        assert "passed 1 (attempted in 1 of 1 runs)" in out
        assert left() == {}


# ---------------------------------------------------------------- grade --repeat

def _lesson_runs(statuses: list[str]):
    from checks.results import LessonResult, new_result
    lesson = {"id": "04", "title": {"en": "threads"}, "checks": [
        {"id": "04.1", "text": {"en": "counts"}, "hint": {}, "points": 1},
        {"id": "04.2", "text": {"en": "join"}, "hint": {}, "points": 1},
        {"id": "04.4", "text": {"en": "exercise"}, "hint": {}, "points": 1, "kind": "exercise"}]}
    runs = []
    for number, first in enumerate(statuses, 1):
        checks = [new_result("04", c) for c in lesson["checks"]]
        checks[0].status, checks[0].message = first, "" if first == "pass" else f"lost an update in run {number}"
        checks[1].status, checks[2].status = "pass", "skipped"
        runs.append([LessonResult(lesson, "lab", checks, 1.0)])
    return runs


def test_graded_n_times_a_check_scores_only_if_it_passed_every_run():
    from checks import report
    from checks.results import combine
    [lesson] = combine(_lesson_runs(["pass", "fail", "pass", "fail"]))
    counts, join, exercise = lesson.checks
    assert (counts.status, counts.score, counts.runs, counts.message) == ("fail", 0, (2, 4), "lost an update in run 2")
    assert (join.status, join.score, join.runs) == ("pass", 1, (4, 4))
    assert exercise.status == "skipped" and exercise.runs is None
    data = report.to_dict([lesson], "alice")
    assert data["score"] == 1 and report.flaky_checks(data["tests"]) == ["04.1 2/4"]


def test_the_gradebook_and_csv_show_the_pass_rate_of_a_flaky_check(tmp_path):
    import csv

    from checks import gradebook, report
    from checks.results import combine
    reports = {"alice": report.to_dict(combine(_lesson_runs(["pass", "fail", "pass"])), "alice"),
               "bob": report.to_dict(combine(_lesson_runs(["pass", "pass", "pass"])), "bob")}
    lessons = [{"id": "04", "title": {"en": "threads"}, "checks": []}]
    gradebook.write_gradebook(tmp_path, reports, lessons, lang="en")
    rows = list(csv.reader((tmp_path / "grades.csv").read_text(encoding="utf-8").splitlines()))
    assert rows[0][-1] == "flaky" and rows[1][0] == "alice" and rows[1][-1] == "04.1 2/3" and rows[2][-1] == ""
    assert len(rows) == 3  # one row per student
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "flaky: 04.1 2/3" in index
    assert "passed 2/3 runs" in (tmp_path / "alice.html").read_text(encoding="utf-8")


def test_grade_repeat_runs_each_folder_n_times(tmp_path):
    import shutil
    folder = tmp_path / "alice" / "tasks_lab"
    shutil.copytree(KIT_ROOT / "lessons" / "01-accept-202", folder,
                    ignore=shutil.ignore_patterns("verifiers", "README.md", "__pycache__"))
    run = subprocess.run([sys.executable, "-m", "checks", "grade", "--lab", str(folder), "--lessons", "01",
                          "--repeat", "2", "--out", str(tmp_path / "out"), "--html"], cwd=KIT_ROOT, text=True,
                         capture_output=True, timeout=300,
                         env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
    assert run.returncode == 0, run.stdout + run.stderr
    saved = json.loads((tmp_path / "out" / "alice.json").read_text())
    assert {json.dumps(test["runs"]) for test in saved["tests"]} == {'{"passed": 2, "tried": 2}'}
    assert "done alice: 5/5" in run.stderr
