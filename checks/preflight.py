"""Before the checks: what is wrong with the learner's folder as a whole, said once.

A missing file, a file that does not compile, a file that shadows a module Python or the kit needs, a
LAB= that points one folder too high: each breaks every check that imports it, and each check would
print the same traceback with its own unrelated hint.  The folder is only read here — nothing in it runs
(compile() parses the source, it executes nothing).  After the run, the checks whose failure names a
problem's file are shown as blocked by it (see `blocked_by`).
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from shared.i18n import t

# Modules the lessons import besides the standard library: a learner file with one of these names
# would be imported instead (the folder comes first on sys.path).
THIRD_PARTY = {"fastapi", "uvicorn", "httpx", "celery", "kombu", "redis", "pymysql", "dotenv", "pydantic",
               "starlette", "anyio", "pytest", "shared", "checks"}


@dataclass
class Problem:
    file: str      # the learner's file it concerns (relative to the folder)
    message: str   # what is wrong and what to do, in the learner's language
    # A missing file is said only when a check failed for it: a file only an extension (or an exercise
    # not taken up) needs is no problem of a folder typed from the course.
    only_if_blocking: bool = False
    kind: str = "other"  # missing | syntax | shadow | cause | other: what a failure caused by it looks like
    signs: tuple[str, ...] = ()  # kind "cause": phrases in a failing check's text that show it failed for it

    @property
    def module(self) -> str:
        return self.file[:-3] if self.file.endswith(".py") else self.file


def _lesson_files(lesson: dict) -> list[str]:
    return [name for name in lesson.get("files", []) if name.endswith((".py", ".sql"))]


def diagnose(lesson: dict, lessons: list[dict], folder: Path) -> list[Problem]:
    problems: list[Problem] = []
    wanted = _lesson_files(lesson)
    present = {p.name for p in folder.iterdir() if p.is_file()} if folder.is_dir() else set()
    if wanted and not any(name in present for name in wanted):
        for sub in ("tasks_lab",):
            if (folder / sub).is_dir() and any((folder / sub / name).is_file() for name in wanted):
                return [Problem(wanted[0], t("{folder} has none of lesson {id}'s files, but {folder2} does: point "
                                             "LAB= at {folder2}", folder=folder, id=lesson['id'],
                                             folder2=folder / sub))]
    for name in wanted:
        path = folder / name
        if not path.is_file():
            near = difflib.get_close_matches(name, sorted(present), n=1, cutoff=0.8)
            guess = t(" (is {near} the same file, misnamed?)", near=near[0]) if near else ""
            problems.append(Problem(name, t("{name} not found in your folder: expected at {path}{guess}", name=name,
                                            path=path, guess=guess),
                                    only_if_blocking=True, kind="missing"))
            continue
        if name.endswith(".py"):
            try:
                compile(path.read_bytes(), str(path), "exec")
            except SyntaxError as exc:
                where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
                line = (exc.text or "").strip()
                problems.append(Problem(name, t("{name} does not compile: {where}: {msg}{line}", name=name,
                                                where=where, msg=exc.msg, line=f"\n    {line}" if line else ""),
                                        kind="syntax"))
            except ValueError as exc:  # e.g. a NUL byte
                problems.append(Problem(name, t("{name} does not compile: {exc}", name=name, exc=exc), kind="syntax"))
    for name in sorted(present):
        stem = name[:-3] if name.endswith(".py") else None
        if stem and (stem in sys.stdlib_module_names or stem in THIRD_PARTY):
            problems.append(Problem(name, t("{folder} has the name of Python's {stem} module and would be imported "
                                            "in its place: rename it (e.g. my_{name})", folder=folder / name,
                                            stem=stem, name=name), kind="shadow"))
    return problems


ENV_LINE = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=")


def env_file_notice(lesson: dict, folder: Path) -> str | None:
    """The learner's own .env.tasks, when broken: the checks never use it (a box has its own servers and
    credentials), so they pass — but the learner's own terminal runs read it and would fail.  Say so."""
    from shared.credentials import URL_KEYS
    from shared.i18n import t
    path = folder / ".env.tasks"
    if not lesson.get("services") or not path.is_file() or path.is_symlink():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    bad = next((n for n, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")
                and not ENV_LINE.match(line)), None)
    keys = {line.split("=", 1)[0].strip().removeprefix("export ").strip() for line in lines if ENV_LINE.match(line)}
    missing = [key for key in URL_KEYS if key not in keys]
    if bad is None and not missing:
        return None
    what = t("line {bad} is not KEY=value", bad=bad) if bad is not None else \
        t("it has no {missing}", missing=', '.join(missing))
    return t("your folder's .env.tasks is broken: {what}. The checks never use it (the box has its own servers and "
             "credentials), but your own terminal runs of this lesson read it and will fail: after make services, "
             "copy the kit's own (cp -p .env.tasks YOUR_FOLDER/)", what=what)


@dataclass(frozen=True)
class Cause:
    """A mistake that breaks many checks at once, recognised from one of their failures (`seen`), so the
    learner reads it once, with the fix, and the other checks it broke wait behind it (`signs`).  `seen` and
    `signs` are phrases of the checks' own messages, in both languages (a check speaks the learner's)."""
    seen: tuple[str, ...]
    file: str
    signs: tuple[str, ...]
    message: str  # in the learner's language
    lessons: tuple[str, ...] = ()  # the lessons whose checks it speaks of (its words name them)


def causes() -> tuple[Cause, ...]:
    """The known causes, their messages in the learner's language."""
    return (
        # The course's connect() is MySQL's; the box's server is MariaDB 10.11 (lesson 11's guide says so first).
        Cause(seen=("has no max_execution_time", "不认识 max_execution_time"), file="state_store.py",
              signs=("max_execution_time", "Unknown system variable", "OperationalError", "1193"),
              message=t("the server here is MariaDB 10.11, which has no max_execution_time (MySQL's), so every "
                        "connect() fails (1193). Change that line in connect() to cur.execute(\"SET SESSION "
                        "max_statement_time = 3\") (seconds), or choose by server version as this lesson's guide "
                        "shows; every check below that connects waits behind it"),
              lessons=("11", "12", "13", "14", "15", "16")),
        # Lesson 13: `>` where `>=` belongs.  13.1 tells it apart (one past the limit with turns taken at the
        # gate); 13.3's 202 at capacity and 13.6's overshoot are the same mistake seen from elsewhere.
        Cause(seen=("the last place was given out twice", "最后一个位置被给了两次"), file="state_store.py",
              signs=("must be 503, got 202", "应返回 503，实际 202",
                     "pushed queued+running to", "让 queued+running 达到"),
              message=t("admit_export's comparison lets a count equal to the limit through: with `limit` jobs in the "
                        "service is full, so refuse when count >= limit (a place is free only while count < limit). "
                        "13.3's 202 and 13.6's overshoot below are this same mistake"),
              lessons=("13",)),
        # Lesson 14's slot without the minute, met again in lesson 16's matrix: the row, the record's claim for
        # it and the 15/15 count are one mistake in schedule_tasks.py, not three about how the drills were run.
        Cause(seen=("must carry the minute of execution", "槽名要包含执行的分钟"), file="schedule_tasks.py",
              signs=("cross_minute_redelivery",),
              message=t("the slot name in schedule_tasks.py does not carry the minute of execution: the same signal "
                        "a minute later lands in the same slot and makes no new job. Format the slot to the minute "
                        "(%Y%m%dT%H%M); the matrix's cross_minute_redelivery row and the record below are this same "
                        "mistake"),
              lessons=("16",)),
    )


def causes_seen(texts: list[str], lesson_id: str) -> list[Problem]:
    """The known causes of lesson `lesson_id` that one of these failing checks' texts shows, as problems to
    say once."""
    return [Problem(cause.file, cause.message, kind="cause", signs=cause.signs) for cause in causes()
            if lesson_id in cause.lessons and any(phrase in text for text in texts for phrase in cause.seen)]


# How a failure caused by a missing file reads, on the line that names the file.
MISSING_SIGNS = ("No such file", "FileNotFoundError", "not found", "does not exist", "is missing", "can't open",
                 "cannot open", "没有", "不存在", "缺少")


def blocked_by(problems: list[Problem], text: str) -> Problem | None:
    """The problem a failing check's message and evidence show to be its cause, if any — not merely a
    problem whose file the evidence mentions (a check may name api_db.py while failing for its own
    reason: then its own finding is what the learner must read)."""
    lines = text.splitlines()
    for problem in problems:
        module = problem.module
        imported = f"No module named '{module}'" in text or f"No module named {module}" in text
        if problem.kind == "missing":
            if imported or any(problem.file in line and any(sign in line for sign in MISSING_SIGNS) for line in lines):
                return problem
        elif problem.kind == "cause":
            if any(sign in text for sign in problem.signs):
                return problem
        elif problem.kind == "syntax":
            if (problem.file in text or f"'{module}'" in text) and any(
                    sign in text for sign in ("SyntaxError", "IndentationError", "TabError", "does not compile")):
                return problem
        elif problem.file in text or f"'{module}'" in text or imported:
            return problem
    return None
