"""One session of checking: a learner's folder taken in once as data, scanned, and each chosen lesson run on
that copy (or on the reference); what the run found is then said in terms of the learner's own folder."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from checks import boxfiles, intake, preflight, tamper
from checks.box import BoxUnavailable
from checks.results import ERROR, NOT_PASSED, NOT_REACHED, SKIPPED, LessonResult, errored, every_check
from checks.runner import run_lesson
from checks.selection import reached_lesson, where_the_folder_is
from checks.workdir import STATE_DIR, UsageError, materialise
from shared import manifest
from shared.i18n import t
from shared.services import ServiceError


def run_many(lessons: list[dict], data: dict, lab: Path | None, scope: str, show=None,
             on_start=None, skip_unreached: bool | None = None) -> list[LessonResult]:
    """Run each lesson (planned ones are reported as such); `scope` names the work/log subfolder.

    A learner's folder is read once, as data, into the host's own copy (checks/intake.py: no link
    followed, no special file read, sizes capped); everything after — the tamper scan, the folder's
    diagnosis, the lesson it reached, every box — only ever sees that copy.  IntakeRefused (a UsageError)
    says which path was refused and why.

    `skip_unreached` (default: when several lessons are run): a lesson the folder has not got to yet —
    none of its new files, nor any later lesson's — is reported "not reached" without running it."""
    if skip_unreached is None:
        skip_unreached = len(lessons) > 1
    if lab is None:
        return _run_lessons(lessons, data, None, None, scope, show, on_start, False)
    # A copy of this run's own: two runs at once (a check beside a watch, parallel tests) never share one.
    copy = boxfiles.private_dir(STATE_DIR / "intake" / scope) / f"{os.getpid()}-{secrets.token_hex(4)}"
    try:
        intake.take_in(lab, copy)
        findings = tamper.scan(copy)
        if findings:  # code that reaches into the checker: no verdict of this folder could be trusted
            results = errored([lesson for lesson in lessons if lesson["status"] == "ready"], tamper.message(findings),
                              tampering=True)
            for result in results:
                if show:
                    show(result)
            return results
        return _run_lessons(lessons, data, lab, copy, scope, show, on_start, skip_unreached)
    finally:
        boxfiles.remove(copy)


def _run_lessons(lessons, data, lab: Path | None, copy: Path | None, scope: str, show, on_start,
                 skip_unreached: bool) -> list[LessonResult]:
    results = []
    reached = reached_lesson(data, copy) if copy else None
    for lesson in lessons:
        if on_start:
            on_start(lesson)
        ahead = copy is not None and (reached is None or lesson["id"] > reached)
        if lesson["status"] != "ready":
            result = every_check(lesson, SKIPPED, t("lesson not built yet (planned)"),
                                 source="planned")
        elif ahead and skip_unreached:
            result = every_check(lesson, NOT_REACHED, where_the_folder_is(lesson, data, reached), str(lab))
        else:
            workdir = STATE_DIR / "work" / scope / lesson["id"]
            log_dir = STATE_DIR / "logs" / scope / lesson["id"]
            materialise(data["lessons"], lesson, workdir, copy)
            problems = preflight.diagnose(lesson, data["lessons"], copy) if copy else []
            try:
                # A folder that has moved past this lesson: its whole schema, and checks of what later
                # lessons replaced are superseded (not counted).
                result = run_lesson(lesson, workdir, log_dir, source=str(lab) if lab else "reference",
                                    schema_upto=reached)
            except (ServiceError, BoxUnavailable) as exc:  # a service down, or no box: says what to do
                raise UsageError(str(exc)) from None
            if lab:
                in_the_learners_terms(result, problems, {workdir: lab, copy: lab})
                if ahead:  # checked on request, though its new files are not there: say where the folder is
                    result.notices.insert(0, where_the_folder_is(lesson, data, reached))
                broken_env = preflight.env_file_notice(lesson, copy)
                if broken_env:
                    result.notices.append(broken_env)
        results.append(result)
        if show:
            show(result)
    return results


def _kit_files_in_work() -> dict[str, Path]:
    """Names the kit lays into a work copy (every lesson's verifiers, shared/, checks/) -> where they live."""
    return {"shared": manifest.KIT_ROOT / "shared", "checks": manifest.KIT_ROOT / "checks",
            **manifest.kit_verifier_files()}


def in_the_learners_terms(result: LessonResult, problems: list, copies: dict[Path, Path]) -> None:
    """Paths in the host's copies (the intake copy, the box's scratch copy) become the learner's own; a
    check that failed because of a problem with the folder as a whole is shown as blocked by it instead
    of repeating the same traceback."""
    kit = {name: str(path) for name, path in _kit_files_in_work().items()}

    def theirs(text: str) -> str:
        for copy, lab in copies.items():
            if str(copy) not in text:
                continue
            for name, path in kit.items():  # the kit's own files in the copy are the kit's, not the learner's
                text = text.replace(f"{copy}/{name}", path)
            text = text.replace(str(copy), str(lab))
        return text
    for problem in problems:
        problem.message = theirs(problem.message)
    blocking = set()
    for c in result.checks:
        c.message = theirs(c.message)
        c.notes = [theirs(n) for n in c.notes]
    # One mistake that broke many checks (lesson 11's MySQL-only line on MariaDB): said once, the rest wait.
    problems = problems + preflight.causes_seen(["\n".join([c.message, *c.notes]) for c in result.checks
                                                 if c.status in NOT_PASSED], result.lesson["id"])
    for c in result.checks:
        if c.status in NOT_PASSED:
            cause = preflight.blocked_by(problems, "\n".join([c.message, *c.notes]))
            if cause is not None:
                blocking.add(cause.file)
                c.status, c.blocked, c.notes = ERROR, cause.file, []
                c.message = t("blocked by the problem above: fix {file} first", file=cause.file)
    result.problems = [p.message for p in problems if not p.only_if_blocking or p.file in blocking]
