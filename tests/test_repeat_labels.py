"""`make check REPEAT=N`'s table says what each check did in every run (issue 41, item 4).

A check is "failed every run" only if it failed in every run of the series, "passed every run" only if it
passed in each, "skipped" only if it was tried in none; a check tried in some runs only is named with its
counts, never "failed every run" -- an exercise skipped in 16 runs and failed in the 4 a race struck is not.
And what the terminal shows of a failure keeps its cause: cut in the middle if it must be, never at the end.
These drive the counting and the cutting with made-up runs: no process is started."""

from __future__ import annotations

import io
import json

import pytest

from checks import repeat, repeat_page

TRACEBACK = "\n".join(["Traceback (most recent call last):",
                       *[f'  File "/tmp/lab-x/slot1/work/tasks_lab/step{i}.py", line {i}, in step{i}\n'
                         f"    step{i + 1}()" for i in range(12)],
                       "AssertionError: counts={'done': 16, 'failed': 1}: an update was lost"])


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")


def result(check_id: str, status: str, message: str | None = None, output: str = "") -> dict:
    return {"id": check_id, "lesson": "04", "status": status, "text": {"en": check_id}, "message": message,
            "output": output}


def series_of(statuses: dict[str, list[str | None]]) -> tuple[repeat.Series, list[repeat.CheckTally]]:
    """One run per position; statuses[check][i] is that check's status in run i+1 (None: not in that
    run's report)."""
    times = len(next(iter(statuses.values())))
    runs = []
    for number in range(1, times + 1):
        tests = []
        for check_id, each in statuses.items():
            status = each[number - 1]
            if status is not None:
                failing = status not in ("pass", "skipped")
                tests.append(result(check_id, status, TRACEBACK if failing else None,
                                  output=TRACEBACK if failing else "all 20 done"))
        runs.append(repeat.Run("04", number, tests=tests))
    series = repeat.Series(["04"], times, parallel=2, burn=2, seed=11, runs=runs, planned=times)
    return series, repeat.tally(runs)


def table(series, rows) -> str:
    stream = io.StringIO()
    repeat.print_table(series, rows, stream)
    return stream.getvalue()


# ---------------------------------------------------------------- the classification

@pytest.mark.parametrize("passed, failed, not_tried, kind", [
    (0, 4, 16, "partial"),   # an exercise tried in the 4 runs a race struck: not "failed every run"
    (0, 20, 0, "failed"),
    (0, 0, 20, "skipped"),
    (16, 4, 0, "flaky"),
    (12, 4, 4, "flaky"),     # passed some, failed others, whatever it did in the rest
    (16, 0, 4, "partial"),   # not "passed every run" either
    (20, 0, 0, "passed"),
])
def test_a_check_is_named_by_what_it_did_in_every_run(passed, failed, not_tried, kind):
    assert repeat.classify(passed, failed, not_tried) == kind


def test_an_exercise_failed_in_4_runs_and_skipped_in_16_is_not_failed_every_run():
    series, [row] = series_of({"04.4": ["fail"] * 4 + ["skipped"] * 16})
    assert row.kind == "partial" and (len(row.failed), len(row.skipped), row.runs) == (4, 16, 20)
    assert row.counts == "failed 4, skipped 16 (attempted in 4 of 20 runs)"
    text = table(series, [row])
    assert "FAILED EVERY RUN" not in text and "NOT ATTEMPTED" not in text
    assert "ATTEMPTED IN SOME RUNS ONLY" in text and "failed 4, skipped 16 (attempted in 4 of 20 runs)" in text
    saved = json.loads(json.dumps(repeat.to_dict(series, [row])))["checks"][0]
    assert (saved["kind"], saved["passed"], saved["failed"], saved["skipped"], saved["runs"]) == \
        ("partial", 0, 4, 16, 20)
    assert saved["failed_runs"] == [1, 2, 3, 4] and saved["skipped_runs"] == list(range(5, 21))
    page = repeat_page.render(series, [row], "en")
    assert "failed every run" not in page and "attempted in some runs only" in page
    assert "failed 4, skipped 16 (attempted in 4 of 20 runs)" in page


def test_a_check_failed_in_all_20_runs_failed_every_run():
    series, [row] = series_of({"04.3": ["fail"] * 20})
    assert row.kind == "failed" and row.counts == "failed 20 (attempted in 20 of 20 runs)"
    text = table(series, [row])
    assert "FAILED EVERY RUN" in text and "ATTEMPTED IN SOME RUNS ONLY" not in text
    assert repeat.to_dict(series, [row])["checks"][0]["kind"] == "failed"
    assert "failed every run" in repeat_page.render(series, [row], "en")
    assert repeat.exit_code(series, [row]) == 1


def test_a_check_skipped_in_every_run_is_not_attempted():
    series, [row] = series_of({"04.5": ["skipped"] * 20})
    assert row.kind == "skipped" and row.counts == "skipped 20 (attempted in 0 of 20 runs)"
    assert "NOT ATTEMPTED (skipped every run)" in table(series, [row])
    assert repeat.exit_code(series, [row]) == 0


def test_passed_16_and_failed_4_is_flaky_with_both_counts():
    series, [row] = series_of({"04.1": ["pass"] * 8 + ["fail"] * 4 + ["pass"] * 8})
    assert row.kind == "flaky" and row.counts == "passed 16, failed 4 (attempted in 20 of 20 runs)"
    text = table(series, [row])
    assert "FLAKY IN YOUR CODE" in text and "evidence: run 9 failed, run 1 passed" in text
    assert repeat.to_dict(series, [row])["checks"][0]["kind"] == "flaky"


def test_a_check_missing_from_a_run_was_not_run_there_and_did_not_fail_every_run():
    # run 3 wrote no report: its one error stands for the whole run; 04.3 neither passed nor failed there
    series, rows = series_of({"04.3": ["fail", "fail", None, "fail"], "04.*": [None, None, "error", None]})
    by_id = {row.id: row for row in rows}
    assert by_id["04.3"].kind == "partial" and by_id["04.3"].not_run == [3]
    assert by_id["04.3"].counts == "failed 3, not run 1 (attempted in 3 of 4 runs)"
    assert by_id["04.*"].kind == "partial" and by_id["04.*"].not_run == [1, 2, 4]


def test_the_groups_come_in_order_and_those_that_failed_lead_their_group():
    _, rows = series_of({"04.2": ["pass", "skipped", "pass", "pass"], "04.4": ["fail", "skipped", "skipped", "fail"],
                         "04.1": ["pass", "fail", "pass", "pass"], "04.3": ["fail"] * 4, "04.5": ["pass"] * 4})
    assert [(row.id, row.kind) for row in rows] == [("04.1", "flaky"), ("04.3", "failed"), ("04.4", "partial"),
                                                    ("04.2", "partial"), ("04.5", "passed")]


def test_the_counts_are_in_chinese_for_a_chinese_learner(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "zh")
    assert repeat.counts_text(0, 4, 16) == "失败 4 次，跳过 16 次（20 次中尝试了 4 次）"


# ---------------------------------------------------------------- the evidence keeps its cause

def test_a_long_traceback_keeps_its_first_line_and_its_assertion():
    lines = repeat.keep_cause(TRACEBACK)
    assert len(lines) == 8 and lines[1] == "…"
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "AssertionError: counts={'done': 16, 'failed': 1}: an update was lost"
    assert lines[-2:] == TRACEBACK.splitlines()[-2:]  # the last frame's line too
    assert repeat.keep_cause("one short finding") == ["one short finding"]
    assert repeat.keep_cause("") == [] and repeat.keep_cause(None) == []


def test_one_line_of_a_traceback_is_its_head_and_its_cause():
    line = repeat.one_line(TRACEBACK)
    assert line.startswith("Traceback (most recent call last):") and " … " in line
    assert line.endswith("AssertionError: counts={'done': 16, 'failed': 1}: an update was lost")


def test_a_long_line_is_cut_in_the_middle_never_at_its_end():
    finding = "the worker read the job " + "x" * 400 + " → 2 tokens were issued for one lease"
    for cut in (repeat.squeeze(finding), repeat.one_line(finding), repeat.keep_cause(finding)[0]):
        assert len(cut) == 240 and "…" in cut
        assert cut.startswith("the worker read the job") and cut.endswith("→ 2 tokens were issued for one lease")


def test_the_table_shows_a_failure_and_its_evidence_with_their_causes():
    series, rows = series_of({"04.1": ["pass", "fail", "pass"]})
    text = table(series, rows)
    assert "1× Traceback (most recent call last):" in text
    assert text.count("AssertionError: counts={'done': 16, 'failed': 1}: an update was lost") == 2  # both
    assert "| Traceback (most recent call last):" in text and "| …" in text
    assert '  File "th…' not in text
