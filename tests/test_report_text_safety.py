"""Every report stays valid whatever the learner prints (issue 39, item 6): a check's message and notes carry
their output, and a NUL, an ESC sequence, a BEL, U+FFFE or a lone surrogate (bytes read with surrogateescape)
in it once made a JUnit file unparseable and stopped the JSON and HTML writes.  Results are made by hand:
nothing is run, no server is started."""

import csv
import json
import xml.etree.ElementTree as ET

import pytest

from checks import console, gradebook, report
from checks.html_report import write_run
from checks.report import xml_safe
from checks.results import ERROR, FAIL, PASS, SKIPPED, CheckResult, LessonResult

LONE = b"\x80".decode("utf-8", "surrogateescape")  # how a learner's undecodable byte reaches a str: "\udc80"
LEARNER = f"nul\x00 \x1b[31mred\x1b[0m bel\x07 rlo\u202e ff\ufffe lone{LONE} 中文 😀"
SEEN = r"nul\x00 \x1b[31mred\x1b[0m bel\x07 rlo" + "\u202e" + r" ff\ufffe lone\udc80 中文 😀"
RAW = ("\x00", "\x1b", "\x07", "\ufffe", LONE)  # none of these may reach a file or the terminal
KEPT = ("\u202e", "中文", "😀")

LESSON = {"id": "01", "title": {"zh": "第一课", "en": "First lesson"}, "checks": [
    {"id": f"01.{n}", "kind": "core", "points": 1, "text": {"zh": f"检查 {n}", "en": f"check {n}"},
     "hint": {"zh": "提示", "en": "hint"}} for n in range(1, 5)]}


def results() -> list[LessonResult]:
    checks = [CheckResult("01", c["id"], c["kind"], c["text"], c["hint"], c["points"]) for c in LESSON["checks"]]
    for check, status in zip(checks, (FAIL, ERROR, SKIPPED, PASS), strict=True):
        check.status, check.message, check.notes = status, LEARNER, [LEARNER, "second line"]
    checks[1].blocked = f"tasks\x1b[2J{LONE}.py"
    checks[3].message = ""
    checks[0].figures = [{"type": "table", "title": {"en": LEARNER}, "columns": ["job"], "rows": [[LEARNER]]}]
    return [LessonResult(LESSON, "/class/bob/tasks_lab", checks, 1.5, notices=[LEARNER], problems=[LEARNER])]


def assert_clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, repr(raw)
    for kept in KEPT:
        assert kept in text, repr(kept)


def test_xml_safe_escapes_exactly_what_xml_forbids():
    forbidden = [chr(c) for c in [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0xD800, 0xE000), 0xFFFE,
                                  0xFFFF]]
    for ch in forbidden:
        assert xml_safe(ch) == ch.encode("unicode_escape").decode("ascii")  # \x1b, \ufffe, \udc80
    allowed = "".join(map(chr, [0x09, 0x0A, 0x0D, *range(0x20, 0xD800), *range(0xE000, 0xFFFE),
                                *range(0x10000, 0x110000)]))
    assert xml_safe(allowed) == allowed  # tab, newline, return, Chinese, emoji, U+202E, C1: all kept
    assert xml_safe(LEARNER) == SEEN


def test_junit_xml_parses_and_shows_the_escapes(tmp_path):
    path = tmp_path / "r.xml"
    report.write_junit(path, results(), f"/class/b{LONE}b/tasks_lab", error=LEARNER)
    root = ET.parse(path).getroot()  # one forbidden character made the whole file unparseable
    words = [v for el in root.iter() for v in (*el.attrib.values(), el.text or "")]
    assert_clean("\n".join(words))
    assert sum(SEEN in w for w in words) >= 5  # the run's error, failure, error and skip messages, a detail
    assert root.get("name") == r"task-lab /class/b\udc80b/tasks_lab"
    assert path.read_bytes().decode("utf-8")  # strict UTF-8, no surrogate written as bytes


def test_results_json_loads_with_the_escapes(tmp_path):
    path = tmp_path / "r.json"
    report.write_json(path, results(), f"/class/b{LONE}b/tasks_lab", error=LEARNER)  # a lone surrogate: no crash
    text = path.read_bytes().decode("utf-8")
    data = json.loads(text)
    assert_clean(text)
    assert data["message"] == SEEN and data["source"] == r"/class/b\udc80b/tasks_lab"
    assert [t["message"] for t in data["tests"]] == [SEEN, SEEN, SEEN, None]
    assert data["tests"][0]["output"] == SEEN + "\nsecond line"
    assert data["tests"][0]["figures"][0]["rows"] == [[SEEN]]
    assert data["lessons"][0]["title"] == LESSON["title"]  # the kit's own text untouched


def test_html_page_and_gradebook_hold_no_raw_control(tmp_path):
    data = report.to_dict(results(), "/class/bob/tasks_lab", error=LEARNER)
    write_run(tmp_path / "run.html", data, "en")
    page = (tmp_path / "run.html").read_bytes().decode("utf-8")
    assert_clean(page)
    assert r"\x1b[31mred\x1b[0m" in page
    gradebook.write_gradebook(tmp_path / "book", {"bob": data}, [LESSON], "en")
    assert_clean((tmp_path / "book" / "bob.html").read_bytes().decode("utf-8"))
    index = (tmp_path / "book" / "index.html").read_bytes().decode("utf-8")
    assert not any(raw in index for raw in RAW)
    with open(tmp_path / "book" / "grades.csv", encoding="utf-8", newline="") as f:
        assert [row[0] for row in csv.reader(f)] == ["student", "bob"]


@pytest.mark.parametrize("first_failure_only", [False, True])
def test_terminal_shows_escapes_not_commands(capsys, first_failure_only):
    result = results()[0]
    result.checks[0].notes.append("over\rwritten \x9b2J \u202ereversed")  # what a terminal obeys besides
    console.print_lesson(result, evidence=True, first_failure_only=first_failure_only)
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, repr(raw)
    assert "中文" in out and "😀" in out
    assert out.encode("utf-8")  # a lone surrogate would stop a UTF-8 terminal's write
    assert r"\x1b[31mred\x1b[0m" in out and r"tasks\x1b[2J\udc80.py" in out
    for raw in ("\r", "\x9b", "\u202e"):  # a carriage return, a C1 CSI, a bidi override
        assert raw not in out, repr(raw)
    if not first_failure_only:
        assert r"over\x0dwritten \x9b2J \u202ereversed" in out


def test_a_verdict_with_learner_text_travels_the_verdict_channel():
    # A check's message quotes learner output, lone surrogate and all: signing and sending it must not fail
    # (the judge would crash and every verdict after it be lost).
    import os

    from checks.verdicts import Reader, Signer
    read_end, write_end = os.pipe()
    try:
        Signer(write_end, b"k" * 32, "run1").send({"type": "result", "id": "01.1", "message": LEARNER})
        records = Reader(b"k" * 32, "run1", 1 << 20, 1 << 24).feed(os.read(read_end, 1 << 16))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert [r["message"] for r in records] == [LEARNER]
