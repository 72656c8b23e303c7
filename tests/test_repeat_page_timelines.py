"""`make check REPEAT=N`'s page draws a flaky check's timelines: one failing run's beside one passing run's,
in two columns each headed by its run and status (issue 41, item 4; README: `.state/repeat/NN/index.html`).
Made-up runs (no lesson is run): check 11.2 passed in run 1 and failed in run 2, each with its figure."""

from __future__ import annotations

import re

import pytest

from checks import repeat, repeat_page
from shared.figures import bar, lane, lanes, mark
from tests import webdriver
from tests.test_html_report import SCREENS, _offline_and_quiet


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")


def claimers(winners: int) -> dict:
    """A lanes figure as a verifier attaches it (shared/figures.py): three claimers of one job, `winners`
    of them got a token."""
    return lanes("claimers of job 1 <&>", [
        lane(f"claimer-{i}", bars=[bar(0.01 * i, 0.20 + 0.01 * i, "claim()", "claim")],
             marks=[mark(0.21 + 0.01 * i, "token" if i <= winners else "None", "ok" if i <= winners else "fail")])
        for i in range(1, 4)], lines=[mark(0.05, "released together", "event")])


def result(status: str, winners: int) -> dict:
    failing = status != "pass"
    return {"id": "11.2", "lesson": "11", "status": status, "text": {"en": "one claimer per job"},
            "message": "2 claimers got a token for one job" if failing else None,
            "output": "round 1: 3 processes × 3 threads claim at once", "figures": [claimers(winners)]}


def flaky_series() -> tuple[repeat.Series, list[repeat.CheckTally]]:
    runs = [repeat.Run("11", 1, tests=[result("pass", 1)]), repeat.Run("11", 2, tests=[result("fail", 2)])]
    series = repeat.Series(["11"], 2, parallel=2, burn=2, seed=11, runs=runs, planned=2)
    return series, repeat.tally(runs)


def test_a_flaky_checks_page_holds_the_failing_and_the_passing_runs_timelines_in_two_columns():
    series, rows = flaky_series()
    assert [row.kind for row in rows] == ["flaky"]
    page = repeat_page.render(series, rows, "en")
    block = page[page.index("<div class='runfigs' data-check='11.2'>"):]
    columns = re.findall(r"<div data-run='(\d+)' data-status='(\w+)'><h4>([^<]*)", block)
    assert columns == [("2", "fail", "run 2 · "), ("1", "pass", "run 1 · ")]  # the failing run first
    run_2, run_1 = block.split("<div data-run=")[1:3]
    for column in (run_2, run_1):  # each column: its own run's figure, drawn by checks/timelines.py
        assert column.count('<svg class="timeline"') == 1 and column.count("data-lane=") == 3, column
    assert run_2.count('data-label="token"') == 2 and run_1.count('data-label="token"') == 1
    assert page.count('<svg class="timeline"') == 2  # drawn once per run: not again in the evidence above
    assert "claimers of job 1 &lt;&amp;&gt;" in page and "claimers of job 1 <&>" not in page  # escaped
    assert "Content-Security-Policy" in page and "<script src" not in page and "<img" not in page


def test_a_flaky_check_with_no_figures_draws_no_timelines():
    series, rows = flaky_series()
    for number in (1, 2):
        rows[0].tests[number].pop("figures")
    page = repeat_page.render(series, rows, "en")
    assert "runfigs" not in page.split("</style>")[1] and "<svg" not in page


def test_the_failing_and_the_passing_runs_timelines_side_by_side_in_headless_chromium(tmp_path):
    """Both runs' SVGs are drawn, each in its headed column, on one row, the failing run on the left."""
    series, rows = flaky_series()
    page = tmp_path / "repeat" / "11" / "index.html"
    repeat_page.write(page, series, rows, "en")
    with webdriver.Browser(tmp_path / "profile", size=(1300, 1000)) as browser:
        browser.open(page.as_uri())
        browser.run("document.querySelector('.runfigs').scrollIntoView()")
        boxes = browser.run("""return [...document.querySelectorAll('.runfigs > div')].map(col => {
            const svg = col.querySelector('svg.timeline'), r = svg.getBoundingClientRect();
            return {run: col.dataset.run, status: col.dataset.status, head: col.querySelector('h4').innerText,
                    visible: getComputedStyle(svg).visibility === 'visible' && r.bottom > 0 &&
                             r.top < innerHeight && r.right <= innerWidth,
                    left: r.left, right: r.right, top: r.top, width: r.width, height: r.height,
                    bars: svg.querySelectorAll('rect.bar').length};
        })""")
        assert [(b["run"], b["status"]) for b in boxes] == [("2", "fail"), ("1", "pass")], boxes
        bad, good = boxes
        assert bad["head"].startswith("run 2") and good["head"].startswith("run 1"), boxes
        for box in boxes:
            assert box["visible"] and box["width"] > 200 and box["height"] > 40 and box["bars"] == 3, box
        assert abs(bad["top"] - good["top"]) < 2, boxes           # one row
        assert bad["right"] <= good["left"], boxes                # side by side, not overlapping
        browser.screenshot(SCREENS / "repeat-11-flaky-timelines.png")
        _offline_and_quiet(browser, page.as_uri())
