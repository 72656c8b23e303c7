"""Every report shows which checks are self-reported (issue 39, item 3): tasks.json says per check where its
evidence comes from; the terminal marks a self-reported check, the JSON carries "evidence", JUnit a property,
and the gradebook a column of each student's self-reported points.  Results are made by hand from the real
tasks.json (lesson 03 has both kinds): nothing is run, no server is started."""

import csv
import json
import xml.etree.ElementTree as ET

from checks import console, gradebook, report
from checks.results import FAIL, PASS, LessonResult, new_result
from shared import manifest

LESSON = manifest.lesson("03")
KIND = {c["id"]: c["evidence"]["kind"] for c in LESSON["checks"]}


def results() -> list[LessonResult]:
    checks = [new_result("03", c) for c in LESSON["checks"]]
    for check in checks:
        check.status = PASS
    checks[-1].status, checks[-1].message = FAIL, "wrong"
    return [LessonResult(LESSON, "/class/bob/tasks_lab", checks, 1.5)]


def test_the_lesson_has_both_kinds_so_each_mark_is_tested_both_ways():
    assert set(KIND.values()) == {"observed", "self_reported"}


def test_the_terminal_marks_only_the_self_reported_checks(capsys, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    console.print_lesson(results()[0])
    out = capsys.readouterr().out
    for cid, kind in KIND.items():
        [line] = [x for x in out.splitlines() if f" {cid} " in x]
        assert line.endswith("· self-reported") == (kind == "self_reported"), line


def test_json_junit_and_gradebook_carry_the_evidence(tmp_path):
    lessons = results()
    data = report.to_dict(lessons, "/class/bob/tasks_lab")
    assert {t["id"]: t["evidence"] for t in data["tests"]} == KIND
    passed_self = sum(c.points for c in lessons[0].checks if c.status == PASS and c.evidence == "self_reported")
    assert data["self_reported_score"] == passed_self > 0 and data["score"] > passed_self

    report.write_junit(tmp_path / "r.xml", lessons, "x")
    cases = ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
    seen = {case.get("name").split()[0]: case.find("properties/property[@name='evidence']").get("value")
            for case in cases}
    assert seen == KIND

    gradebook.write_gradebook(tmp_path / "book", {"bob": json.loads(json.dumps(data))}, manifest.lessons(), "en")
    with open(tmp_path / "book" / "grades.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["self_reported"] == str(passed_self) and rows[0]["total"] == str(data["score"])
    page = (tmp_path / "book" / "bob.html").read_text(encoding="utf-8")
    badges = page.count('<span class="badge" title="Decided on what the learner')
    assert badges == list(KIND.values()).count("self_reported")
    index = (tmp_path / "book" / "index.html").read_text(encoding="utf-8")
    assert ">Self-reported</th>" in index and f'data-sort="{passed_self}">{passed_self}</td>' in index
