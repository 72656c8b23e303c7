"""What a run finds: the statuses, one result per check and per lesson, TAP lines read into results, and a
lesson whose every check has one verdict (planned, not reached, an error said once)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

TAP_LINE = re.compile(r"^(not ok|ok)\s+\d+\s+-\s+(\d\d\.\d+)\b(.*?)(?:\s+#\s*(SKIP|TODO)\b\s*(.*))?$", re.I)
OUTPUT_CAP = 500  # characters of output kept per check, as in Exercism's results.json

PASS, FAIL, ERROR, TIMEOUT, SKIPPED = "pass", "fail", "error", "timeout", "skipped"
SUPERSEDED = "superseded"  # a later lesson the folder has reached replaced this check's subject: not counted
NOT_REACHED = "not_reached"  # the folder has not got to this lesson yet (none of its new files): not run
NOT_PASSED = (FAIL, ERROR, TIMEOUT)
NO_VERDICT = (SKIPPED, SUPERSEDED, NOT_REACHED)  # not tried in that run: neither a pass nor a failure


def notice(message: str, actionable: bool = True) -> dict:
    """A line said about a run beside its checks, with its kind decided where it is made.  Actionable: the
    learner has something to do (a broken .env.tasks, a folder that has not reached the lesson) — shown
    first, with what to do.  Not actionable: for information only (a look-at-the-result statement of a
    schema file the server cannot answer, checks/servers.py) — shown after the checks, saying nothing
    needs doing.  A plain string, as older results and the host's own notices hold, is actionable."""
    return {"message": message, "actionable": actionable}


def notice_parts(item) -> tuple[str, bool]:
    """(message, actionable) of a notice(), or of a plain string (actionable)."""
    if isinstance(item, dict):
        return str(item.get("message", "")), bool(item.get("actionable", True))
    return str(item), True


@dataclass
class CheckResult:
    lesson: str
    id: str
    kind: str
    text: dict
    hint: dict
    points: int
    status: str = ERROR
    regression: bool = False  # an earlier lesson's check re-run on this folder (shown apart, no points)
    blocked: str = ""         # the learner file whose problem (said once, above the checks) stopped this check
    tampered: bool = False    # the verdict could not be trusted: code reached into the checker
    seconds: float = 0.0
    message: str = ""
    notes: list[str] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)  # pictures of the evidence (shared/figures.py)
    runs: tuple[int, int] | None = None  # graded N times (grade --repeat): (runs passed, runs tried)
    # tasks.json's evidence kind: "observed" (facts the judge gathered itself) or "self_reported" (what a
    # process that imported learner code said about itself) -- shown in every report, so it can be weighed
    evidence: str = "self_reported"

    @property
    def score(self) -> int:
        return self.points if self.status == PASS else 0

    @property
    def counted(self) -> bool:
        return self.status != SUPERSEDED

    @property
    def bonus(self) -> bool:
        """The kit's extensions beyond the course: scored apart, never part of the course's marks."""
        return self.kind == "extension"

    @property
    def output(self) -> str:
        text = "\n".join(self.notes)
        return text if len(text) <= OUTPUT_CAP else text[: OUTPUT_CAP - 1] + "…"


@dataclass
class LessonResult:
    lesson: dict
    source: str
    checks: list[CheckResult]
    seconds: float
    logs: list[Path] = field(default_factory=list)
    notices: list = field(default_factory=list)  # notice() records or plain (actionable) strings
    problems: list[str] = field(default_factory=list)  # what is wrong with the learner's folder, said once

    def notices_of(self, actionable: bool) -> list[str]:
        """The messages of one kind of notice, each once, in order."""
        return list(dict.fromkeys(message for message, kind in map(notice_parts, self.notices)
                                  if kind == actionable and message))

    @property
    def status(self) -> str:
        if any(c.status in NOT_PASSED for c in self.checks):
            return FAIL
        if self.checks and all(c.status == NOT_REACHED for c in self.checks if not c.regression):
            return NOT_REACHED
        return PASS


def parse_tap(text: str) -> dict[str, dict]:
    """Check id -> {status, message, notes, seconds}; diagnostics (`# ...`) follow their test line."""
    found: dict[str, dict] = {}
    current = None
    for raw in text.splitlines():
        line = raw.rstrip()
        match = TAP_LINE.match(line)
        if match:
            verdict, check_id, _, directive, reason = match.groups()
            current = None
            if check_id in found:  # a verifier that reports one id twice: keep the first verdict
                continue
            if verdict.lower() == "ok":
                status = SKIPPED if (directive or "").upper() == "SKIP" else PASS
            else:
                status = FAIL
            current = found[check_id] = {"status": status, "message": reason or "", "notes": [], "seconds": 0.0}
            continue
        if current is not None and line.startswith("#"):
            body = line[1:].strip()
            if body.startswith("seconds:"):
                try:
                    current["seconds"] = float(body.split(":", 1)[1])
                except ValueError:
                    pass
            else:
                current["notes"].append(line[2:] if line.startswith("# ") else line[1:])
        elif line and not line.startswith("1.."):
            current = None  # ordinary output ends a check's diagnostics
    return found


def new_result(lesson_id: str, check: dict, regression: bool = False) -> CheckResult:
    return CheckResult(lesson=lesson_id, id=check["id"], kind=check.get("kind", "core"), text=check["text"],
                       hint=check["hint"], points=0 if regression else check["points"], regression=regression,
                       # a check that does not say where its evidence comes from is not claimed observed
                       evidence=check.get("evidence", {}).get("kind", "self_reported"))


def every_check(lesson: dict, status: str, message: str, source: str = "", tampered: bool = False) -> LessonResult:
    """A lesson whose every check has one status and message, with nothing run: planned, not reached, or
    an error said once for the whole folder.  The report keeps the lesson's real maximum."""
    checks = [new_result(lesson["id"], c) for c in lesson["checks"]]
    for c in checks:
        c.status, c.message, c.tampered = status, message, tampered
    return LessonResult(lesson, source, checks, 0.0)


def errored(lessons: list[dict], message: str, tampering: bool = False) -> list[LessonResult]:
    """Every check of these lessons as an error with one message: the report keeps its real maximum."""
    results = [every_check(lesson, ERROR, message, tampered=tampering) for lesson in lessons]
    for result in results:
        result.problems = [message]
    return results


def combine(series: list[list[LessonResult]]) -> list[LessonResult]:
    """The same lessons run N times, as one result (grade --repeat): a check passes only if it passed
    every run it was tried in; it carries (runs passed, runs tried), and a failure shows the first
    failing run's words.  A check any run saw tampering with stays tampered."""
    first = series[0]
    combined = []
    for index, lesson in enumerate(first):
        runs = [results[index] for results in series]
        checks = []
        for position, check in enumerate(lesson.checks):
            seen = [run.checks[position] for run in runs if position < len(run.checks)
                    and run.checks[position].id == check.id]
            tried = [c for c in seen if c.status not in NO_VERDICT]
            passed = sum(c.status == PASS for c in tried)
            chosen = next((c for c in tried if c.status != PASS), check)
            chosen.runs = (passed, len(tried)) if tried else None
            chosen.tampered = any(c.tampered for c in seen)
            checks.append(chosen)
        combined.append(LessonResult(lesson.lesson, lesson.source, checks, sum(r.seconds for r in runs),
                                     lesson.logs, lesson.notices, lesson.problems))
    return combined
