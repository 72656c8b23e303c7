"""What the terminal shows: a lesson's checks with their marks and reasons, whose code a run checks, the
run's total, the lessons with their last results, `make help` and the README's lesson table."""

from __future__ import annotations

import os
import re
from pathlib import Path

from checks import progress, report
from checks.box import availability
from checks.results import ERROR, FAIL, NOT_PASSED, NOT_REACHED, PASS, SKIPPED, SUPERSEDED, TIMEOUT, LessonResult
from checks.sandbox import boxing
from shared import manifest
from shared.i18n import pick, t, t_in

# Besides what XML forbids (report.xml_safe), what a terminal obeys: a carriage return (it overwrites the line),
# DEL, the C1 controls (U+009B starts an escape sequence as ESC [ does) and the bidi overrides (U+202E shows
# what follows it reversed).
TERMINAL_ONLY = re.compile("[\r\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """A learner's words (their prints, their errors) as the terminal shows them: never a command to it."""
    return TERMINAL_ONLY.sub(report.escape, report.xml_safe(text))


MARKS = {PASS: "✓", FAIL: "✗", ERROR: "!", TIMEOUT: "⏱", SKIPPED: "–", SUPERSEDED: "↷", NOT_REACHED: "○"}


def status_label(status: str) -> str:
    """The word after a check's time: none for pass and fail (the mark says it), else its status."""
    labels = {ERROR: t("ERROR"), TIMEOUT: t("TIMEOUT"), SKIPPED: t("SKIP"), SUPERSEDED: t("SUPERSEDED"),
              NOT_REACHED: t("NOT REACHED")}
    return " " + labels[status] if status in labels else ""


def regression_cause(lesson: dict, earlier_id: str) -> str:
    """A regression failed: it passed on what lesson `earlier_id` built, so this lesson's changes broke it —
    name them (the files this lesson rewrites of what came before, else every file it brings)."""
    data = manifest.load()
    before = {name for lesson in data["lessons"] if lesson["id"] <= earlier_id for name in lesson.get("files", [])}
    mine = [n for n in lesson.get("files", []) if n.endswith((".py", ".sql"))]
    changed = ", ".join([n for n in mine if n in before] or mine) or "?"
    return t("this is lesson {earlier_id}'s check, re-run on your lesson-{id} files: a change you made for lesson "
             "{id} ({changed}) broke what lesson {earlier_id} built", earlier_id=earlier_id, id=lesson['id'],
             changed=changed)


def print_lesson(result: LessonResult, evidence: bool = False, first_failure_only: bool = False) -> None:
    lesson = result.lesson
    print("\n" + t("Lesson {id} — {title}", id=lesson['id'], title=pick(lesson['title'])))
    if result.source == "planned":
        print("  " + t("(planned, not built yet: not counted as passed)"))
        return
    for notice in result.notices_of(actionable=True):  # something to do: said first, with what to do
        print(f"  ! {shown(notice)}")
    for problem in result.problems:
        print(f"  ✗ {shown(problem)}")
    if result.problems:
        print("  " + t("Fix the problem(s) above first: the checks that need them are blocked."))
    shown_failure = False
    explained: dict[str, str] = {}  # a message already shown -> the check that showed it
    own = [c for c in result.checks if not c.regression]
    regressions = [c for c in result.checks if c.regression]
    for heading, group in ((None, own), (t("Regressions (earlier lessons' checks, re-run on this lesson's files):"),
                                          regressions)):
        if heading and group:
            print(f"  {heading}")
        for c in group:
            label = t(" BLOCKED ({blocked})", blocked=shown(c.blocked)) if c.blocked else status_label(c.status)
            if c.evidence == "self_reported":  # decided on what the learner's own process said (tasks.json)
                label += t(" · self-reported")
            print(f"  {MARKS[c.status]} {c.id:<6} {pick(c.text)}  ({c.seconds:.2f}s){label}")
            if c.status in NOT_PASSED and c.blocked:
                pass  # the problem is said once, above the checks
            elif c.status in NOT_PASSED and c.message and c.message in explained:
                print("      " + t("same cause as {explained}: fix that first", explained=explained[c.message]))
            elif c.status in NOT_PASSED and not (first_failure_only and shown_failure):
                shown_failure = True
                explained.setdefault(c.message, c.id)
                if c.message:
                    print("      " + t("why: {message}", message=shown(c.message)))
                for line in [n for n in c.notes if n != c.message][-10:]:
                    print(f"      | {shown(line)}")
                if c.regression:
                    print("      " + regression_cause(result.lesson, c.lesson))
                print("      " + t("hint: {hint}", hint=pick(c.hint)))
            elif c.status in (SKIPPED, SUPERSEDED, NOT_REACHED) and c.message and c.message not in explained:
                explained.setdefault(c.message, c.id)
                print(f"      {shown(c.message)}")
            elif evidence and c.status == PASS:
                for line in c.notes[-6:]:
                    print(f"      · {shown(line)}")
    failed = [c for c in result.checks if c.status in NOT_PASSED]
    if first_failure_only and len(failed) > 1:
        print("  " + t("({n_failed} more failure(s) not explained here: fix the first one; all reasons: make check)",
                       n_failed=len(failed) - 1))
    print(f"  {report.count_text(report.count_checks(result.checks))}" +
          t(" ({seconds:.1f}s)", seconds=result.seconds))
    if failed and result.logs:
        existing = [os.path.relpath(p) for p in result.logs if p.exists()]
        if existing:
            print("  " + t("full logs: ") + ", ".join(existing))
    for notice in result.notices_of(actionable=False):  # nothing to do: after the checks, never as an error
        print("  " + t("note (nothing to do): {notice}", notice=shown(notice)))


def announce(lab: Path | None) -> None:
    """The first line of every run: whose code is being checked."""
    if lab:
        print(t("checking your folder: {lab} (read only, never changed)", lab=lab))
        if boxing() != "on":
            print(t("warning: no box, your code runs directly on this machine ({availability})",
                    availability=availability()[1] or 'LAB_BOX=off'))
    else:
        print(t("checking the kit's reference files, not your folder"))


def print_total(results: list[LessonResult]) -> None:
    """The run's last line: every check counted, the score, what was superseded, the bonus."""
    every = [c for r in results for c in r.checks]
    m, n = report.marks(every), report.count_checks(every)
    line = t("total: {count_text}; score {score}/{max_score}", score=m['score'], max_score=m['max_score'],
             count_text=report.count_text(n))
    if n["superseded"]:
        line += t("; {superseded} superseded by later lessons, not counted", superseded=n["superseded"])
    if m["max_bonus"]:
        line += t(" (plus bonus {bonus}/{max_bonus} from the kit's extensions beyond the course)", bonus=m['bonus'],
                  max_bonus=m['max_bonus'])
    print("\n" + line)


def last_result(entry: dict | None) -> str:
    """A lesson's last result in `make list`: the same words (report.count_text) as the run's summary line,
    its regressions left to the run itself."""
    if not entry:
        return "—"
    return report.count_text(entry["counts"], regressions=False) if "counts" in entry else entry["status"]


def print_list(data: dict) -> None:
    """`make list`: each lesson with the last result of the reference and of the learner's folder."""
    reference = progress.load()
    folder = progress.learner_folder()
    mine = progress.load(str(folder)) if folder else {}
    print(t("your folder: {folder}", folder=folder)
           if folder else t("your folder: (none remembered yet; make check LAB=DIR)"))
    for lesson in data["lessons"]:
        planned = "" if lesson["status"] == "ready" else t(" (planned)")
        print(f"{lesson['id']}  {pick(lesson['title'])}{planned} — " +
              t("{n_checks} checks; reference last: {last}; your folder last: {last2}", n_checks=len(lesson['checks']),
                last=last_result(reference.get(lesson['id'])), last2=last_result(mine.get(lesson['id']))))


def print_help(data: dict) -> None:
    """`make help`: the make targets, then the lessons."""
    print(t("Task Lab commands:"))
    rows = [
        ("make lesson-NN", t("run lesson NN's reference files and checks (creates .venv on first use)")),
        ("make check LAB=DIR [LESSON=NN]", t("check your own folder (DIR is remembered: later just make check)")),
        ("make check LESSON=all", t("check every lesson on your folder")),
        ("make check REPEAT=20 BURN=2", t("run your lesson 20 times under load: which checks pass only by chance")),
        ("make forget", t("forget the remembered folder")),
        ("make list", t("lessons with the last result of the reference and of your folder")),
        ("make watch LESSON=NN LAB=DIR", t("re-check whenever you save")),
        ("make diff-NN", t("what lesson NN changes")),
        ("make doctor", t("check this machine")),
        ("make test", t("run the kit's own test suite")),
        ("make test-all", t("the whole of it: every mutant, every check run alone")),
        ("make bench", t("run the teaching benchmarks (table + JSON)")),
        ("make soak", t("the long soak: killed workers, restarted servers, then a ledger (lost must be 0)")),
        ("make monitor [PORT=8016]", t("lesson 16's live monitor page (backlog, ages, outbox lag, queue depths); "
                                       "during make soak it shows the soak's numbers")),
        ("make flake [LESSON=NN] [ROUNDS=N] [PARALLEL=K] [BURN=C]",
         t("flake hunt: the reference in repeated parallel runs (optionally under CPU load); every non-pass listed")),
        ("make grade-drill", t("distributed grading drill: three Celery workers, one killed, one stopped, the broker "
                               "restarted, then a ledger")),
        ("make services", t("start Redis and MySQL for your own terminal work")),
        ("make services-status", t("are the services up?")),
        ("make services-down", t("stop the services the kit started")),
        ("make clean", t("stop the services and remove .state/")),
    ]
    for cmd, text in rows:
        print(f"  {cmd:<30} {text}")
    print("\n" + t("Lessons:"))
    for lesson in data["lessons"]:
        state = "" if lesson["status"] == "ready" else t(" (planned)")
        print(f"  make lesson-{lesson['id']}   {pick(lesson['title'])}{state}")


def evidence_list(data: dict) -> str:
    """The README's list of the checks open to a lie, generated from tasks.json's evidence fields: per
    lesson, each check that a process which imported learner code decides (self_reported), and on what."""
    core = [c for lesson in data["lessons"] for c in lesson["checks"] if c.get("kind", "core") == "core"]
    observed = sum(c["evidence"]["kind"] == "observed" for c in core)
    lines = [f"Core checks observed by the judge: {observed} of {len(core)}; self-reported: {len(core) - observed}. "
             f"Every self-reported check, core or not:", ""]
    for lesson in data["lessons"]:
        own = [c for c in lesson["checks"] if c["evidence"]["kind"] == "self_reported"]
        if own:
            lines.append(f"- **{lesson['id']}** ({len(own)} of {len(lesson['checks'])})")
            lines += [f"  - {c['id']}{'' if c.get('kind', 'core') == 'core' else ' (' + c['kind'] + ')'}: "
                      f"{c['evidence']['what']['en']}" for c in own]
    return "\n".join(lines)


def lesson_table(data: dict) -> str:
    """The README's lesson table, generated from tasks.json (tests keep the README in step)."""
    lines = [f"| # | Lesson | {t_in('zh', 'Lesson')} | Checks | Status |", "|---|---|---|---|---|"]
    for lesson in data["lessons"]:
        lines.append(f"| {lesson['id']} | [{lesson['title']['en']}]({lesson['folder']}/) | {lesson['title']['zh']} "
                     f"| {len(lesson['checks'])} | {lesson['status']} |")
    return "\n".join(lines)
