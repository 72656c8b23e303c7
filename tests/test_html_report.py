"""The HTML run report and the class gradebook, on small report dicts made by hand (no lesson is run)."""

import csv
import html
import json
import os
import re
import subprocess
import sys
import time

from pathlib import Path

from checks import gradebook
from checks.html_page import MARKS
from checks.html_report import render_run, write_run
from tests import webdriver

# A tiny course: lesson 01 has a core check, an exercise and an extension; lesson 02 re-runs 01.1 as a
# regression.
LESSONS = [
    {"id": "01", "title": {"zh": "第一课", "en": "First lesson"}, "checks": [
        {"id": "01.1", "kind": "core", "points": 2, "text": {"zh": "返回 202", "en": "answers 202"},
         "evidence": {"kind": "self_reported"}},
        {"id": "01.2", "kind": "exercise", "points": 1, "text": {"zh": "练习", "en": "the exercise"}},
        {"id": "01.3", "kind": "extension", "points": 1, "text": {"zh": "扩展", "en": "the extension"}}]},
    {"id": "02", "title": {"zh": "第二课", "en": "Second lesson"}, "checks": [
        {"id": "02.1", "kind": "core", "points": 2, "text": {"zh": "有界队列", "en": "a bounded queue"}},
        {"id": "02.2", "kind": "core", "points": 1, "text": {"zh": "超时", "en": "a timeout"},
         "evidence": {"kind": "self_reported"}}]},
]
CHECKS = {c["id"]: (lesson["id"], c) for lesson in LESSONS for c in lesson["checks"]}


def check(cid, status="pass", message=None, output=None, regression=False, tampering=False):
    """One test record as checks.report.to_dict writes it."""
    lesson, c = CHECKS[cid]
    points = 0 if regression else c["points"]
    return {"lesson": lesson, "id": cid, "name": f"{cid} {c['text']['en']}", "kind": c["kind"],
            "regression": regression, "bonus": c["kind"] == "extension", "tampering": tampering,
            "evidence": c.get("evidence", {}).get("kind", "observed"), "text": c["text"], "status": status,
            "points": points,
            "score": points if status == "pass" else 0, "seconds": 1.25, "message": message,
            "hint": None if status in ("pass", "skipped", "superseded") else {"zh": "看看日志", "en": "read the log"},
            "output": output}


def marks(tests):
    counted = [t for t in tests if t["status"] != "superseded"]
    course = [t for t in counted if not t["bonus"]]
    extra = [t for t in counted if t["bonus"]]
    return {"score": sum(t["score"] for t in course), "max_score": sum(t["points"] for t in course),
            "self_reported_score": sum(t["score"] for t in course if t["evidence"] == "self_reported"),
            "bonus": sum(t["score"] for t in extra), "max_bonus": sum(t["points"] for t in extra)}


def make_report(by_lesson, source="/class/alice/tasks_lab", error=None):
    """by_lesson: lesson id -> its tests (own checks first, then regressions), as the runner orders them."""
    lessons, tests = [], []
    for lid, rows in by_lesson.items():
        title = next(lesson["title"] for lesson in LESSONS if lesson["id"] == lid)
        failed = any(t["status"] in ("fail", "error", "timeout") for t in rows)
        lessons.append({"id": lid, "title": title, "status": "fail" if failed else "pass", **marks(rows),
                        "seconds": 3.5})
        tests += rows
    status = "error" if error else "fail" if any(lesson["status"] == "fail" for lesson in lessons) else "pass"
    return {"version": 1, "kit": "task-lab", "source": source, "created_at": "2025-01-02T03:04:05+00:00",
            "status": status, "message": error, "tampering": any(t["tampering"] for t in tests),
            **marks(tests), "lessons": lessons, "tests": tests}


def missing_folder_report(name):
    """What grade writes for a folder that is not there: every check an error with one message."""
    message = f"--lab class/{name}/tasks_lab: no such folder"
    return make_report({lesson["id"]: [check(c["id"], "error", message) for c in lesson["checks"]]
                        for lesson in LESSONS}, source=f"class/{name}/tasks_lab", error=message)


def class_reports():
    alice = make_report({"01": [check("01.1"), check("01.2"), check("01.3")],
                         "02": [check("02.1"), check("02.2"), check("01.1", regression=True)]})
    bob = make_report({"01": [check("01.1"), check("01.2", "fail", "wrong count"), check("01.3", "skipped")],
                       "02": [check("02.1", "fail", "queue unbounded"), check("02.2", "timeout", "hung"),
                              check("01.1", "fail", "old token finished", regression=True)]},
                      source="/class/bob/tasks_lab")
    carol = make_report({"01": [check("01.1", "superseded", "lesson 02 replaced it"), check("01.2"),
                                check("01.3", "pass", tampering=True)],
                         "02": [check("02.1", "fail", "queue unbounded"), check("02.2")]},
                        source="/class/carol/tasks_lab")
    return {"alice": alice, "bob": bob, "carol": carol, "dave": missing_folder_report("dave")}


def every_status_report():
    return make_report({"01": [check("01.1", "pass"), check("01.2", "fail", "bad", "line 1\nboom"),
                               check("01.3", "error", "crashed", "Traceback")],
                        "02": [check("02.1", "timeout", "hung", "still waiting"), check("02.2", "skipped"),
                               check("01.1", "superseded", "lesson 02 replaced it", regression=True)]})


EXTERNAL = [re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.I), re.compile(r"@import", re.I),
            re.compile(r"url\(\s*[\"']?\s*(?:https?:)?//", re.I)]


def assert_offline(page):
    for pattern in EXTERNAL:
        assert not pattern.search(page), pattern.pattern


def test_every_status_has_its_mark_and_failures_show_hint_and_output():
    report = every_status_report()
    report["tests"].append(dict(check("02.2", "not_reached", "your folder's files reach lesson 01"), id="02.9"))
    page = render_run(report, "en")
    for status, mark in MARKS.items():
        assert f'data-status="{status}"' in page and mark in page, status
    assert "<pre" in page and "line 1\nboom" in page and "Traceback" in page and "still waiting" in page
    assert page.count("<pre") == 3  # fail, error and timeout: never for a pass or a skip
    assert "Hint: read the log" in page
    assert "1.2 s" in page and "/class/alice/tasks_lab" in page and "2025-01-02T03:04:05+00:00" in page


def test_header_keeps_score_and_bonus_apart_and_flags_tampering():
    report = make_report({"01": [check("01.1"), check("01.2", "fail", "x"), check("01.3", tampering=True)]})
    page = render_run(report, "en")
    assert '<dd class="score">2/3</dd>' in page and '<dd class="bonus">1/1</dd>' in page
    assert "tampering suspected" in page
    assert "tampering" not in render_run(make_report({"01": [check("01.1")]}), "en")


def test_regressions_sit_under_their_own_heading_and_extensions_are_bonus():
    page = render_run(every_status_report(), "en")
    lesson2 = page[page.index('id="lesson-02"'):]
    assert "<h3>Regressions</h3>" in lesson2
    assert lesson2.index("<h3>Regressions</h3>") < lesson2.index('<span class="cid">01.1</span>')
    lesson1 = page[page.index('id="lesson-01"'):page.index('id="lesson-02"')]
    assert "Regressions" not in lesson1  # the regression of 01.1 belongs to lesson 02's section
    extension = lesson1[lesson1.index('<span class="cid">01.3</span>'):]
    assert '<span class="badge">bonus</span>' in extension.split("</li>")[0]


def test_learner_text_is_escaped_everywhere(tmp_path):
    evil = "<script>alert(1)</script>"
    report = make_report({"01": [check("01.1", "fail", evil, f"out {evil} <img src=x onerror=alert(2)>"),
                                 check("01.2"), check("01.3")]}, source=f'"><b>{evil}')
    report["message"] = evil
    page = render_run(report, "en")
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert html.escape(evil) in page
    reports = {f"x{evil}": report, "bob": class_reports()["bob"]}
    gradebook.write_gradebook(tmp_path, reports, LESSONS, "en")
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert index.count("<script") == 1  # only the kit's own sorting script
    assert html.escape(evil) in index
    assert all(p.parent == tmp_path for p in tmp_path.iterdir())  # a name cannot place a file elsewhere


def test_pages_load_nothing_from_outside(tmp_path):
    assert_offline(render_run(every_status_report(), "en"))
    gradebook.write_gradebook(tmp_path, class_reports(), LESSONS, "zh")
    for path in tmp_path.glob("*.html"):
        page = path.read_text(encoding="utf-8")
        assert_offline(page)
        assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_chinese_and_english_labels(monkeypatch):
    report = every_status_report()
    en, zh = render_run(report, "en"), render_run(report, "zh")
    assert "Regressions" in en and "Lesson 02" in en and "answers 202" in en and "First lesson" in en
    assert "回归检查" in zh and "第 02 课" in zh and "返回 202" in zh and "第一课" in zh and "加分" in zh
    assert "Regressions" not in zh and 'lang="zh-CN"' in zh and "提示: 看看日志" in zh


def test_write_run_takes_the_language_from_lab_lang(monkeypatch, tmp_path):
    monkeypatch.setenv("LAB_LANG", "zh")
    write_run(tmp_path / "r" / "run.html", every_status_report())
    assert "回归检查" in (tmp_path / "r" / "run.html").read_text(encoding="utf-8")
    monkeypatch.delenv("LAB_LANG")
    write_run(tmp_path / "run.html", every_status_report())
    assert "Regressions" in (tmp_path / "run.html").read_text(encoding="utf-8")


def test_a_report_from_the_kits_own_to_dict_renders():
    # The real contract: checks.report.to_dict's output, from hand-made results (nothing is run).
    from checks import report
    from checks.results import CheckResult, LessonResult
    lesson = dict(LESSONS[0], checks=[dict(c, hint={"zh": "提示", "en": "hint"}) for c in LESSONS[0]["checks"]])
    results = [CheckResult(lesson="01", id=c["id"], kind=c["kind"], text=c["text"], hint=c["hint"],
                           points=c["points"], status=s, message="m" if s != "pass" else "")
               for c, s in zip(lesson["checks"], ("pass", "fail", "skipped"), strict=False)]
    page = render_run(report.to_dict([LessonResult(lesson, "", results, 2.0)], "/x/tasks_lab"), "en")
    assert "✓" in page and "✗" in page and "–" in page and '<dd class="score">2/3</dd>' in page


def test_gradebook_writes_index_pages_and_csv(tmp_path):
    reports = class_reports()
    gradebook.write_gradebook(tmp_path / "out", reports, LESSONS, "en")
    out = tmp_path / "out"
    index = (out / "index.html").read_text(encoding="utf-8")
    for name in reports:
        assert f'<a href="{name}.html">{name}</a>' in index
        page = (out / f"{name}.html").read_text(encoding="utf-8")
        assert reports[name]["source"] in page and 'href="index.html"' in page
    with open(out / "grades.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["student", "01", "02", "total", "max_total", "self_reported", "bonus"]
    table = {r[0]: r[1:] for r in rows[1:]}
    assert list(table) == ["alice", "bob", "carol", "dave"]
    # self_reported: the points of the total whose check rests on what the learner's process said (01.1, 02.2)
    assert table["alice"] == ["3", "3", "6", "6", "3", "1"]    # extensions are the bonus, not the lesson's score
    assert table["bob"] == ["2", "0", "2", "6", "2", "0"]
    assert table["carol"] == ["1", "1", "2", "4", "1", "1"]    # the superseded 01.1 leaves the maximum
    assert table["dave"] == ["0", "0", "0", "6", "0", "0"]
    assert all(re.fullmatch(r"\d+", v) for r in rows[1:] for v in r[1:])  # numbers only: an LMS imports it


def test_grid_colours_totals_and_flags(tmp_path):
    gradebook.write_gradebook(tmp_path, class_reports(), LESSONS, "en")
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    grid = index[index.index('<table id="grid"'):index.index("</table>")]
    rows = {re.search(r'<a href="[^"]+">([^<]+)</a>', r).group(1): r for r in grid.split("<tr")[2:]}
    assert "background:hsl(120," in rows["alice"] and "background:hsl(0," in rows["bob"]
    assert "<b>6</b>/6" in rows["alice"] and "<b>2</b>/6" in rows["bob"]
    assert 'class="tampered"' in rows["carol"].split(">")[0] and "⚠" in rows["carol"]
    assert "⚠" not in rows["alice"]
    assert "regression not passed: 01.1" in rows["bob"] and "R✗" in rows["bob"]
    assert "↷ superseded: 1" in rows["carol"]
    assert "sortable" in grid and "addEventListener('click'" in index


def test_a_missing_folder_is_not_reached_not_failed(tmp_path):
    reports = class_reports()
    gradebook.write_gradebook(tmp_path, reports, LESSONS, "en")
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    dave = index[index.index('href="dave.html"'):].split("</tr>")[0]
    assert dave.count('class="cell nr"') == 2 and dave.count("not reached") == 2
    bob = index[index.index('href="bob.html"'):].split("</tr>")[0]
    assert "not reached" not in bob  # a failed lesson is a failure, not an absence
    assert gradebook.not_reached(reports["dave"]["lessons"][0], reports["dave"]["tests"][:3])
    # Errors without a message about something absent (a crash) are not "not reached".
    crashed = make_report({"01": [check(c, "error", "Traceback: boom") for c in ("01.1", "01.2", "01.3")]})
    assert not gradebook.not_reached(crashed["lessons"][0], crashed["tests"])
    zh = gradebook.render_index(reports, LESSONS, "zh")
    assert "未到达" in zh and "全班成绩册" in zh and "最难的检查" in zh


def test_hardest_checks_are_ordered_by_how_many_did_not_pass(tmp_path):
    rows = gradebook.hardest(class_reports())
    counts = [r["count"] for r in rows]
    assert counts == sorted(counts, reverse=True)
    top = rows[0]
    assert (top["id"], top["count"], top["of"], top["fail"], top["message"]) == ("02.1", 2, 3, 2, "queue unbounded")
    by_key = {(r["id"], r["regression"]): r for r in rows}
    assert by_key[("01.1", True)]["count"] == 1 and by_key[("01.1", False)]["count"] == 0
    assert by_key[("01.1", False)]["superseded"] == 1       # counted apart, never as a failure
    assert by_key[("02.2", False)]["timeout"] == 1
    assert all(r["not_reached"] == 1 for r in rows if not r["regression"])  # dave, counted apart
    gradebook.write_gradebook(tmp_path, class_reports(), LESSONS, "en")
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    table = index[index.index('<table id="hardest"'):]
    table = table[:table.index("</table>")]
    ids = re.findall(r'<td class="cid" data-sort="([^"]+)"', table)
    assert ids[0] == "02.1" and set(ids) >= {"01.1", "01.2", "02.2"}
    shown = [int(n) for n in re.findall(r'<td class="num" data-sort="(\d+)"><b>', table)]
    assert shown == sorted(shown, reverse=True)
    assert "regression" in table and "queue unbounded" in table


KIT = Path(__file__).resolve().parent.parent
SCREENS = KIT / ".state" / "screenshots"


def ten_students():
    """The four of class_reports() and six more, so the grid is the 10-student picture of the note."""
    reports = class_reports()
    for i, name in enumerate(["erin", "frank", "grace", "heidi", "ivan", "judy"]):
        failing = "fail" if i % 2 else "pass"
        reports[name] = make_report({"01": [check("01.1"), check("01.2", failing, "wrong count"), check("01.3")],
                                     "02": [check("02.1"), check("02.2", "pass" if i % 3 else "timeout", "hung")]},
                                    source=f"/class/{name}/tasks_lab")
    return reports


def _offline_and_quiet(browser, page_url):
    """No console error, and nothing requested but the page itself (file://) and data: URLs."""
    assert browser.console_errors() == []
    outside = [u for u in browser.requested_urls() if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))]
    assert outside == [], outside


def test_the_gradebook_in_headless_chromium(tmp_path):
    """Grid of exactly students × lessons cells, sorting runs, a click opens that student's own checks."""
    reports = ten_students()
    gradebook.write_gradebook(tmp_path / "book", reports, LESSONS, "en")
    url = (tmp_path / "book" / "index.html").as_uri()
    with webdriver.Browser(tmp_path / "profile") as browser:
        browser.open(url)
        cells = browser.run("return document.querySelectorAll('#grid tbody tr td.cell').length")
        rows = browser.run("return document.querySelectorAll('#grid tbody tr').length")
        assert (rows, cells) == (10, 10 * len(LESSONS))
        assert browser.run("return document.querySelectorAll('#grid th[tabindex]').length") > 0  # the script ran
        browser.screenshot(SCREENS / "gradebook-10-students.png")
        _offline_and_quiet(browser, url)
        browser.click("#grid a[href='bob.html']")
        browser.wait_for("return location.href.endsWith('bob.html') && document.readyState === 'complete'")
        text = browser.run("return document.body.innerText")
        assert "/class/bob/tasks_lab" in text and "queue unbounded" in text and "old token finished" in text
        assert "/class/alice/" not in text
        _offline_and_quiet(browser, url)


def test_lesson_timelines_in_headless_chromium(tmp_path):
    """`check … --html` on a learner's folder (here a copy of the reference): lesson 02's timeline has a
    lane per consumer, never more than two permits held at once, and the reference's drawn beside it."""
    from checks import cli
    from checks.workdir import materialise
    from shared import manifest
    data = manifest.load()
    lesson = next(lesson for lesson in data["lessons"] if lesson["id"] == "02")
    env_home = os.environ.get("LAB_HOME")
    assert cli.main(["run", "02"]) == 0  # records the reference's timelines for the comparison
    lab = materialise(data["lessons"], lesson, tmp_path / "tasks_lab")
    page = tmp_path / "mine.html"
    cli.main(["run", "02", "--lab", str(lab), "--html", str(page)])
    with webdriver.Browser(tmp_path / "profile", size=(1300, 1000)) as browser:
        browser.open(page.as_uri())
        held = browser.run(OVERLAP_JS, "#lesson-02 li[data-status] .figpair [data-source=learner]", "hold")
        assert held and max(held) <= 2 and 2 in held, held
        assert browser.run(OVERLAP_JS, "#lesson-02 .figpair [data-source=reference]", "hold"), "no reference lanes"
        browser.run("document.querySelector('#lesson-02 .figpair').scrollIntoView()")
        browser.screenshot(SCREENS / "lesson-02-timeline.png")
        _offline_and_quiet(browser, page.as_uri())
    assert env_home == os.environ.get("LAB_HOME")


def test_lesson_06_serial_and_pool_share_one_axis_in_headless_chromium(tmp_path):
    """`make check LESSON=06 HTML=…`'s page: the serial calls and the worker processes' calls as lanes."""
    from checks import cli
    page = tmp_path / "r06.html"
    assert cli.main(["run", "06", "--html", str(page)]) == 0
    with webdriver.Browser(tmp_path / "profile", size=(1300, 1000)) as browser:
        browser.open(page.as_uri())
        kinds = browser.run("return [...document.querySelectorAll('#lesson-06 rect.bar')].map(b => b.dataset.kind)")
        assert kinds.count("serial") >= 4 and kinds.count("pool") >= 4, kinds
        browser.run("document.querySelector('#lesson-06 svg.timeline').scrollIntoView()")
        browser.screenshot(SCREENS / "lesson-06-serial-vs-pool.png")
        _offline_and_quiet(browser, page.as_uri())


# For each timeline under `scope`: the most bars of `kind` open at one instant (a sweep over the bars).
OVERLAP_JS = """
const [scope, kind] = arguments, peaks = [];
for (const svg of document.querySelectorAll(scope + ' svg.timeline[data-kind=lanes]')) {
  const edges = [];
  for (const b of svg.querySelectorAll('rect.bar[data-kind=' + kind + ']')) {
    edges.push([+b.dataset.start, 1], [+b.dataset.end, -1]);
  }
  if (!edges.length) continue;
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);  // an end before a start at the same instant
  let open = 0, most = 0;
  for (const [, d] of edges) { open += d; most = Math.max(most, open); }
  peaks.push(most);
}
return peaks;
"""


def test_run_and_grade_write_html_through_the_command_line(tmp_path):
    """`run … --html FILE` writes the run's page; `grade … --html` writes the gradebook beside the reports."""
    from checks import cli
    page = tmp_path / "run.html"
    assert cli.main(["run", "01", "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "01.1" in text and "✓" in text
    out = tmp_path / "grades"
    lab = tmp_path / "alice" / "tasks_lab"
    lab.mkdir(parents=True)
    (lab / "api_states.py").write_text("")
    cli.main(["grade", "--lab", str(lab), "--lessons", "01", "--out", str(out), "--html", "--unsafe"])
    assert (out / "index.html").is_file() and (out / "alice.html").is_file()
    assert (out / "grades.csv").read_text(encoding="utf-8").splitlines()[0].startswith("student,01,")


def test_a_queue_whose_depth_stands_still_turns_red_in_the_monitor(tmp_path):
    """make monitor's one judgement: a non-empty queue whose depth has not moved for 10 s of the samples'
    own clock is marked "not moving"; a moving or empty one is not.  The samples' clock is set in the
    feed the page reads (the soak's), never waited out."""
    import httpx2 as httpx

    from shared.proc import free_port, wait_until
    feed = tmp_path / "lab" / "logs" / "soak" / "monitor.json"
    feed.parent.mkdir(parents=True)
    base = time.time() + 600  # ahead of the clock: the feed stays fresh however slow the test

    def sample(offset: float, fast: int, bulk: int) -> None:
        feed.write_text(json.dumps({"at": base + offset, "db": {}, "redis": {
            "queues": {"exports.fast": fast, "exports.bulk": bulk}, "unacked": 0}}))

    def tile(name: str) -> str:
        return (f"const t = document.querySelector('#queues .tile[data-stat=\"{name}\"]');"
                " return t && [t.querySelector('.v').textContent, t.classList.contains('stuck')]")

    sample(0, 3, 5)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    page = subprocess.Popen([sys.executable, "-m", "checks", "monitor", "--port", str(port), "--source", "soak"],
                            cwd=KIT, env=dict(os.environ, LAB_HOME=str(tmp_path / "lab")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def answers():
            try:
                return httpx.get(url + "api/stats", timeout=2).json().get("source") == "soak"
            except httpx.HTTPError:
                return False
        wait_until(answers, 60, "the monitor page to answer")
        with webdriver.Browser(tmp_path / "profile") as browser:
            browser.open(url)
            assert browser.wait_for(tile("exports.fast")) == ["3", False]
            sample(11, 3, 4)  # 11 s later by the samples' clock: fast has not moved, bulk has
            browser.wait_for(f"const v = (() => {{ {tile('exports.bulk')} }})(); return v && v[0] === '4'")
            assert browser.run(tile("exports.fast")) == ["3", True]
            assert browser.run(tile("exports.bulk")) == ["4", False]
            sample(30, 0, 4)  # fast drained (empty is never stuck); bulk still 4, for 19 s now
            browser.wait_for(f"const v = (() => {{ {tile('exports.fast')} }})(); return v && v[0] === '0'")
            assert browser.run(tile("exports.fast")) == ["0", False]
            assert browser.run(tile("exports.bulk")) == ["4", True]
            assert browser.console_errors() == []
            outside = [u for u in browser.requested_urls()
                       if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:")) and not u.startswith(url)]
            assert outside == [], outside
    finally:
        page.terminate()
        page.wait(20)
