"""The learner's loop (issue 41, items 5 and 6): counts agree everywhere, and a notice the learner cannot act on
is not shown as an error above the checks.

(5) Lesson 09's only regression was SKIPPED (an extension not taken up) and the run said "regressions: 0 of 1
passed": a learner read a failed regression.  Only what ran is in "of N"; what was skipped is said apart — in
the terminal, the JSON, the JUnit, the page and `make list` alike, all from report.counts.
(6) From lesson 11 on, a schema file's look at its result the server cannot answer came first, as "! ...",
like an error.  It needs nothing: it comes after the checks, once, saying so; what the learner can act on
(the course's max_execution_time line, a broken .env.tasks) still comes first, with its fix.

Results are made by hand: nothing is run, no server is started."""

from __future__ import annotations

import xml.etree.ElementTree as ET
import pytest

from checks import console, packing, preflight, progress, report, servers
from checks.html_report import render_run
from checks.results import ERROR, FAIL, PASS, SKIPPED, CheckResult, LessonResult, notice
from checks.session import in_the_learners_terms
from shared import manifest

DATA = manifest.load()
WRONG = ("0 of 1 passed", "0 of 2 passed", "1 of 2 passed")


@pytest.fixture(autouse=True)
def _english(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")


def _check(lesson: str, check_id: str, status: str, regression: bool = False, message: str = "") -> CheckResult:
    return CheckResult(lesson, check_id, "extension" if regression else "core", {"en": f"check {check_id}",
                       "zh": f"检查 {check_id}"}, {"en": "a hint", "zh": "提示"}, 0 if regression else 1,
                       status=status, regression=regression, message=message)


def lesson09(*regressions: str, notices: list | None = None, problems: list | None = None) -> LessonResult:
    """Lesson 09's own checks passed, then its regressions with these statuses (as the course's folder)."""
    lesson = manifest.lesson("09", DATA)
    own = [_check("09", c["id"], PASS) for c in lesson["checks"]]
    again = [_check("08", f"08.{n}", status, True, "extension not attempted" if status == SKIPPED else "")
             for n, status in enumerate(regressions, 5)]
    return LessonResult(lesson, "/home/me/tasks_lab", own + again, 2.0, notices=notices or [],
                        problems=problems or [])


def _terminal(capsys, result: LessonResult) -> str:
    console.print_lesson(result)
    console.print_total([result])
    return capsys.readouterr().out


# --- (5) counts ------------------------------------------------------------------------------------------

def test_a_skipped_regression_is_said_skipped_in_the_terminal_never_0_of_1_passed(capsys):
    out = _terminal(capsys, lesson09(SKIPPED))
    own = len(manifest.lesson("09", DATA)["checks"])
    assert f"  {own} passed; regressions: none ran (1 skipped) (2.0s)" in out, out
    assert f"total: {own} passed; regressions: none ran (1 skipped); score" in out, out
    assert not any(wrong in out for wrong in WRONG), out
    out = _terminal(capsys, lesson09(PASS, SKIPPED))
    assert f"  {own} passed; regressions: 1 of 1 passed, 1 skipped (2.0s)" in out, out
    out = _terminal(capsys, lesson09(FAIL, SKIPPED))  # a regression that ran and failed is still said so
    assert "regressions: 0 of 1 passed, 1 skipped" in out, out


def test_counts_keep_what_did_not_run_out_of_of_n_in_both_languages():
    n = report.count_checks(lesson09(PASS, SKIPPED).checks)
    assert (n["regressions"], n["regressions_passed"], n["regressions_skipped"]) == (1, 1, 1)
    assert report.count_text(n, "zh").endswith("；回归：运行的 1 项中通过 1 项，跳过 1 项")
    none_ran = report.count_checks(lesson09(SKIPPED).checks)
    assert report.regressions_text(none_ran, "zh") == "回归：一项也没有运行（跳过 1 项）"
    assert report.regressions_text(report.count_checks(lesson09().checks), "en") == ""  # no regressions: no part
    # a stored count from an older run (fewer keys) still reads
    assert report.count_text({"passed": 3, "failed": 0, "not_attempted": 0, "not_reached": 0, "regressions": 0,
                              "regressions_passed": 0}, "en") == "3 passed"


def test_a_skipped_regression_is_skipped_in_the_json_and_junit(tmp_path):
    result = lesson09(SKIPPED)
    data = report.to_dict([result], result.source)
    for counts in (data["counts"], data["lessons"][0]["counts"]):
        assert counts["regressions"] == 0 and counts["regressions_passed"] == 0  # none ran: none in "of N"
        assert counts["regressions_skipped"] == 1 and counts["failed"] == 0
    regression = next(test for test in data["tests"] if test["regression"])
    assert regression["status"] == "skipped" and data["status"] == "pass"
    assert report.count_text(data["lessons"][0]["counts"], "en") == report.count_text(report.count_tests(data["tests"]),
                                                                                        "en")
    report.write_junit(tmp_path / "r.xml", [result], result.source)
    root = ET.parse(tmp_path / "r.xml").getroot()
    suite = root.find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "1")
    case = next(c for c in suite.iter("testcase") if "(regression)" in c.get("name"))
    assert case.find("skipped") is not None and case.find("failure") is None and case.find("error") is None
    assert report.junit_counts([_check("01", "01.1", s) for s in (PASS, FAIL, ERROR, SKIPPED)]) == \
        {"tests": 4, "failures": 1, "errors": 1, "skipped": 1}


def test_a_skipped_regression_is_skipped_on_the_page():
    result = lesson09(SKIPPED)
    page = render_run(report.to_dict([result], result.source), "en")
    assert "regressions: none ran (1 skipped)" in page
    assert not any(wrong in page for wrong in WRONG)
    assert "回归：一项也没有运行（跳过 1 项）" in render_run(report.to_dict([result], result.source), "zh")


def test_make_list_counts_with_the_same_function(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "PROGRESS", tmp_path / "progress.json")
    result = lesson09(SKIPPED)
    result.source = progress.REFERENCE
    progress.record([result])
    entry = progress.load()["09"]
    assert entry["counts"] == report.count_checks(result.checks)
    own = len(manifest.lesson("09", DATA)["checks"])
    assert (entry["passed"], entry["total"]) == (own, own)  # passed of what ran: the skipped one in neither
    said = console.last_result(entry)
    assert said == report.count_text(report.count_checks(result.checks), regressions=False) == f"{own} passed"
    console.print_list(DATA)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("09  "))
    assert f"reference last: {said};" in line and not any(wrong in line for wrong in WRONG), line


# --- (6) notices -----------------------------------------------------------------------------------------

INFO = ("schema_jobs.sql: `SELECT @@session.transaction_isolation` only looks at the result, and this server "
        "cannot answer it (1193); passed over — the checks do not need it")


def test_servers_makes_a_look_at_the_result_notice_informational(tmp_path, monkeypatch):
    """prepare_services decides the kind: a SELECT/SHOW the server cannot answer needs nothing."""
    class Cursor:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, statement):
            if statement.lstrip().upper().startswith("SELECT @@"):
                raise RuntimeError("(1193, \"Unknown system variable 'transaction_isolation'\")")

    class Conn:
        def cursor(self):
            return Cursor()

        def close(self):
            pass

    monkeypatch.setattr(servers.servicectl, "up", lambda services: None)
    monkeypatch.setattr(servers.servicectl, "reset_database", lambda name: None)
    monkeypatch.setattr(servers, "ensure_credentials", lambda: {})
    monkeypatch.setattr(servers, "task_env_text", lambda secret: "")
    monkeypatch.setattr(servers, "app_connect", lambda secret, database: Conn())
    (tmp_path / "schema_jobs.sql").write_text("CREATE TABLE t (id INT);\nSELECT @@session.transaction_isolation;\n")
    made = servers.prepare_services({"id": "11", "services": ["redis", "mysql"]}, tmp_path, ["schema_jobs.sql"])
    assert len(made) == 1 and made[0]["actionable"] is False
    assert "schema_jobs.sql" in made[0]["message"] and "the checks do not need it" in made[0]["message"]
    # it crosses the verdict channel and a grading worker's wire as JSON, and keeps its kind
    result = lesson09(notices=made)
    wire = packing.results_to_wire([result], None, "")
    back = packing.wire_to_results(wire, DATA, "/home/me/tasks_lab")[0][0]
    assert back.notices_of(actionable=False) == [made[0]["message"]] and back.notices_of(actionable=True) == []


def test_an_informational_notice_comes_after_the_checks_once_without_the_error_mark(capsys):
    result = lesson09(SKIPPED, notices=[notice(INFO, actionable=False), notice(INFO, actionable=False)])
    console.print_lesson(result)
    lines = capsys.readouterr().out.splitlines()
    shown = [n for n, line in enumerate(lines) if INFO in line]
    assert len(shown) == 1, lines  # once, though two rounds both reported it
    note = lines[shown[0]]
    assert note == "  note (nothing to do): " + INFO and "!" not in note
    last_check = max(n for n, line in enumerate(lines) if line.startswith(("  ✓ ", "  – ")))
    assert shown[0] > last_check, lines
    assert not any(line.startswith("  ! ") for line in lines), lines


def test_what_the_learner_can_act_on_comes_first_with_its_fix(capsys):
    """The course's max_execution_time line (lesson 11 on MariaDB) is said once above the checks with its
    fix; an actionable notice (a plain string, as the host's own are) keeps its "!" above them too, and the
    informational one still goes below."""
    lesson = manifest.lesson("11", DATA)
    checks = [_check("11", c["id"], FAIL, message="the server is MariaDB, which has no max_execution_time: change "
                     "that line in connect()") for c in lesson["checks"][:2]]
    env = "your folder's .env.tasks is broken: line 3 is not KEY=value. Copy the kit's own"
    result = LessonResult(lesson, "/home/me/tasks_lab", checks, 1.0, notices=[env, notice(INFO, actionable=False)])
    in_the_learners_terms(result, [], {})
    assert any("max_statement_time" in problem for problem in result.problems)
    console.print_lesson(result)
    lines = capsys.readouterr().out.splitlines()
    first_check = min(n for n, line in enumerate(lines) if line.startswith("  ! 11.") or line.startswith("  ✗ 11."))
    fix = next(n for n, line in enumerate(lines) if "max_statement_time" in line)
    bang = next(n for n, line in enumerate(lines) if line == f"  ! {env}")
    info = next(n for n, line in enumerate(lines) if INFO in line)
    assert bang < first_check and fix < first_check and lines[fix].startswith("  ✗ "), lines
    assert info > first_check and "nothing to do" in lines[info], lines
    assert sum("max_statement_time" in line for line in lines) == 1  # said once, the checks wait behind it
    assert preflight.causes()[0].message in lines[fix]


def test_notices_of_reads_plain_strings_as_actionable_and_records_by_kind():
    result = lesson09(notices=["do this", notice("just so you know", actionable=False), notice("fix that")])
    assert result.notices_of(actionable=True) == ["do this", "fix that"]
    assert result.notices_of(actionable=False) == ["just so you know"]
