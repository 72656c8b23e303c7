"""Reports: a results.json in the spirit of Exercism's test-runner interface, and JUnit XML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from checks.results import ERROR, FAIL, NOT_PASSED, NOT_REACHED, PASS, SKIPPED, SUPERSEDED, LessonResult
from shared.i18n import lang as current_lang
from shared.i18n import pick, t_in

REPORT_VERSION = 1

# What XML 1.0 cannot carry at all (not even as &#...;): the C0 controls but tab, newline and return, U+FFFE,
# U+FFFF, and surrogates — a Python str holds a lone one after surrogateescape decoding, and no UTF-8 encoder
# takes it.  A learner's output (their prints, their exception's words) may hold any of them.
NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def xml_safe(text: str) -> str:
    """`text` with each character XML 1.0 forbids written as its visible escape (`\\x1b`, `\\ufffe`,
    `\\udc80`); all else, Chinese, emoji, U+202E, is kept.  Every report passes learner text through it:
    the JUnit XML (one such character made a whole file unparseable), the results JSON and so the pages
    made from it (a lone surrogate stopped their UTF-8 write), and the terminal (an ESC or BEL there is a
    command to it)."""
    return NOT_IN_XML.sub(escape, text)


def escape(match: re.Match) -> str:
    """One matched character as its visible escape: \\x1b, \\u202e."""
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _safe_tree(value):
    """A report dict with xml_safe applied to every string in it, keys too."""
    if isinstance(value, str):
        return xml_safe(value)
    if isinstance(value, dict):
        return {_safe_tree(k): _safe_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe_tree(v) for v in value]
    return value


def overall(lessons: list[LessonResult], error: str | None = None) -> str:
    """pass / fail, or error when the run itself could not happen (bad folder, broken kit)."""
    if error:
        return ERROR
    return FAIL if any(lesson.status in (FAIL, NOT_REACHED) for lesson in lessons) else PASS


def marks(checks) -> dict:
    """The course's marks (core + exercise) and the bonus (the kit's extensions), kept apart; and how much of
    the course's score rests on checks whose evidence is self-reported (for an instructor to weigh)."""
    course = [c for c in checks if not c.bonus and c.counted]
    extra = [c for c in checks if c.bonus and c.counted]
    return {"score": sum(c.score for c in course), "max_score": sum(c.points for c in course),
            "self_reported_score": sum(c.score for c in course if c.evidence == "self_reported"),
            "bonus": sum(c.score for c in extra), "max_bonus": sum(c.points for c in extra)}


# --- counting: the one set of words every view uses (terminal, JSON, JUnit, make list, HTML) -----------
#   passed · failed (fail, error, timeout, blocked) · not attempted (skipped: an exercise not taken up, a
#   check not selected) · not reached (the folder has not got to the lesson) — of the lesson's own checks;
#   regressions (earlier lessons' checks re-run) apart: passed out of those that ran, those skipped or not
#   reached said beside it, never inside "of N"; superseded checks are not counted at all (only said apart).

def outcome(status: str | None) -> str:
    """What a check's status counts as, the same in every view: passed or failed (it ran: pass / fail,
    error, timeout), skipped or not_reached (it did not run), or superseded (not counted)."""
    if status == SUPERSEDED:
        return "superseded"
    if status == PASS:
        return "passed"
    if status in NOT_PASSED:
        return "failed"
    if status == NOT_REACHED:
        return "not_reached"
    return "skipped"


def counts(tests) -> dict:
    """Counts from (status, regression) pairs.  Own checks: passed, failed, not_attempted (skipped),
    not_reached.  Regressions: `regressions` is how many ran (passed or not), `regressions_passed` of
    them passed; `regressions_skipped` and `regressions_not_reached` did not run and are in neither.
    `superseded`: not counted anywhere else (a later lesson replaced the check's subject)."""
    n = {"passed": 0, "failed": 0, "not_attempted": 0, "not_reached": 0, "regressions": 0, "regressions_passed": 0,
         "regressions_skipped": 0, "regressions_not_reached": 0, "superseded": 0}
    own = {"passed": "passed", "failed": "failed", "skipped": "not_attempted", "not_reached": "not_reached",
           "superseded": "superseded"}
    again = {"passed": "regressions_passed", "skipped": "regressions_skipped",
             "not_reached": "regressions_not_reached", "superseded": "superseded"}
    for status, regression in tests:
        kind = outcome(status)
        if regression and kind in ("passed", "failed"):
            n["regressions"] += 1
        key = (again if regression else own).get(kind)
        if key:
            n[key] += 1
    return n


def count_checks(checks) -> dict:
    return counts((c.status, c.regression) for c in checks)


def count_tests(tests: list[dict]) -> dict:
    return counts((t.get("status"), bool(t.get("regression"))) for t in tests)


def _joined(parts: list[str], lang: str) -> str:
    text = parts[0]
    for more in parts[1:]:
        text = t_in(lang, "{counts}, {more}", counts=text, more=more)
    return text


def regressions_text(n: dict, lang: str | None = None) -> str:
    """`regressions: 1 of 1 passed, 1 skipped`, or `regressions: none ran (1 skipped)`; "" when there are
    none.  Only the regressions that ran are in "of N"."""
    lang = lang or current_lang()
    ran, passed = n.get("regressions", 0), n.get("regressions_passed", 0)
    idle = [t_in(lang, "{n} skipped", n=n["regressions_skipped"]) if n.get("regressions_skipped") else None,
            t_in(lang, "{n} not reached", n=n["regressions_not_reached"]) if n.get("regressions_not_reached")
            else None]
    idle = [part for part in idle if part]
    if ran:
        return _joined([t_in(lang, "regressions: {passed} of {ran} passed", passed=passed, ran=ran), *idle], lang)
    if idle:
        return t_in(lang, "regressions: none ran ({idle})", idle=_joined(idle, lang))
    return ""


def count_text(n: dict, lang: str | None = None, regressions: bool = True) -> str:
    """`5 passed, 1 failed, 2 not attempted; regressions: 2 of 2 passed, 1 skipped` (zero parts left out,
    passed always said), in the learner's language or `lang`; `regressions=False` leaves their part out.
    `n` is counts()'s dict, or one an older run stored (a key it lacks counts 0)."""
    lang = lang or current_lang()
    parts = [t_in(lang, "{n} passed", n=n.get("passed", 0)),
             t_in(lang, "{n} failed", n=n["failed"]) if n.get("failed") else None,
             t_in(lang, "{n} not attempted", n=n["not_attempted"]) if n.get("not_attempted") else None,
             t_in(lang, "{n} not reached", n=n["not_reached"]) if n.get("not_reached") else None]
    text = _joined([part for part in parts if part], lang)
    again = regressions_text(n, lang) if regressions else ""
    return t_in(lang, "{counts}; {regressions}", counts=text, regressions=again) if again else text


def is_flaky(test: dict) -> bool:
    """Graded N times (grade --repeat), it passed some runs and failed others."""
    runs = test.get("runs")
    return bool(runs) and 0 < runs["passed"] < runs["tried"]


def flaky_checks(tests: list[dict]) -> list[str]:
    """`04.1 13/20` for each flaky check of a report: it earned no points, and the pass rate says it was
    luck, not a steady mistake."""
    return [f'{test["id"]} {test["runs"]["passed"]}/{test["runs"]["tried"]}' for test in tests if is_flaky(test)]


def to_dict(lessons: list[LessonResult], source: str, error: str | None = None) -> dict:
    """The report every other view is made from (results JSON, the HTML pages, the gradebook, make list);
    its strings are xml_safe, since messages, notes, figures and the folder's path can hold learner text."""
    tests = []
    for lesson in lessons:
        for c in lesson.checks:
            tests.append({
                "lesson": c.lesson, "id": c.id, "name": f"{c.id} {c.text['en']}", "kind": c.kind,
                "regression": c.regression, "bonus": c.bonus, "tampering": c.tampered, "evidence": c.evidence,
                "text": c.text, "status": c.status, "points": c.points, "score": c.score,
                "seconds": round(c.seconds, 3), "message": c.message or None,
                "hint": c.hint if c.status not in (PASS, SKIPPED, SUPERSEDED, NOT_REACHED) else None,
                "output": c.output or None,
                **({"figures": c.figures} if c.figures else {}),
                **({"runs": {"passed": c.runs[0], "tried": c.runs[1]}} if c.runs else {}),
            })
    return _safe_tree({
        "version": REPORT_VERSION,
        "kit": "task-lab",
        "source": source,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": overall(lessons, error),
        "message": error,
        "tampering": any(c.tampered for lesson in lessons for c in lesson.checks),
        **marks([c for lesson in lessons for c in lesson.checks]),
        "counts": count_checks([c for lesson in lessons for c in lesson.checks]),
        "lessons": [{"id": lesson.lesson["id"], "title": lesson.lesson["title"], "status": lesson.status,
                     **marks(lesson.checks), "counts": count_checks(lesson.checks),
                     "seconds": round(lesson.seconds, 3)} for lesson in lessons],
        "tests": tests,
    })


def write_json(path: Path, lessons: list[LessonResult], source: str, error: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_dict(lessons, source, error), ensure_ascii=False, indent=2) + "\n",
                    encoding="utf-8")


def junit_counts(checks) -> dict:
    """A JUnit suite's counts, by outcome() as every other view counts: what did not run (skipped, not
    reached, superseded — a skipped regression too) is `skipped`, never a failure; JUnit's own split of
    what failed into failures (fail) and errors (error, timeout) on top."""
    kinds = [outcome(c.status) for c in checks]
    failures = sum(c.status == FAIL for c in checks)
    return {"tests": len(kinds), "failures": failures, "errors": kinds.count("failed") - failures,
            "skipped": len(kinds) - kinds.count("passed") - kinds.count("failed")}


def write_junit(path: Path, lessons: list[LessonResult], source: str, error: str | None = None) -> None:
    root = ET.Element("testsuites", name=f"task-lab {source}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if error:
        suite = ET.SubElement(root, "testsuite", name="task-lab", tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="task-lab", name="run")
        ET.SubElement(case, "error", message=error)
        totals["tests"] = totals["errors"] = 1
    for lesson in lessons:
        counts = junit_counts(lesson.checks)
        for key in totals:
            totals[key] += counts[key]
        suite = ET.SubElement(root, "testsuite", name=f"lesson {lesson.lesson['id']} {lesson.lesson['title']['en']}",
                              time=f"{lesson.seconds:.3f}", **{k: str(v) for k, v in counts.items()})
        for c in lesson.checks:
            name = (f"{c.id} {c.text['en']}" + (" (regression)" if c.regression else "")
                    + (" (extension: bonus)" if c.bonus else ""))
            case = ET.SubElement(suite, "testcase", classname=f"lesson{c.lesson}", name=name,
                                 time=f"{c.seconds:.3f}")
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="evidence", value=c.evidence)
            detail = "\n".join(filter(None, [c.output, "hint: " + pick(c.hint)]))
            if c.status == FAIL:
                ET.SubElement(case, "failure", message=c.message or "failed").text = detail
            elif outcome(c.status) == "failed":  # error, timeout
                ET.SubElement(case, "error", message=c.message or c.status, type=c.status).text = detail
            elif outcome(c.status) != "passed":  # skipped, not reached, superseded: did not run
                ET.SubElement(case, "skipped", message=c.message or c.status)
    for key, value in totals.items():
        root.set(key, str(value))
    for element in root.iter():  # every name, message and detail: each may carry learner text
        element.attrib = {key: xml_safe(value) for key, value in element.attrib.items()}
        if element.text:
            element.text = xml_safe(element.text)
    ET.indent(root)  # one element a line: a reviewer (and a diff) can read it
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
