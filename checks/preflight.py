"""Before the checks: what is wrong with the learner's folder as a whole, said once.

A missing file, a file that does not compile, a file that shadows a module Python or the kit needs, a
LAB= that points one folder too high: each breaks every check that imports it, and each check would
print the same traceback with its own unrelated hint.  The folder is only read here — nothing in it runs
(compile() parses the source, it executes nothing).  After the run, the checks whose failure names a
problem's file are shown as blocked by it (see `blocked_by`).
"""

from __future__ import annotations

import difflib
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
    kind: str = "other"  # missing | syntax | shadow | other: what a failure caused by it looks like

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
                return [Problem(wanted[0], t(
                    f"{folder} 里没有第 {lesson['id']} 课的文件，但 {folder / sub} 里有：LAB= 应指向 {folder / sub}",
                    f"{folder} has none of lesson {lesson['id']}'s files, but {folder / sub} does: "
                    f"point LAB= at {folder / sub}"))]
    for name in wanted:
        path = folder / name
        if not path.is_file():
            near = difflib.get_close_matches(name, sorted(present), n=1, cutoff=0.8)
            guess = t(f"（是不是 {near[0]} 写错了名字？）", f" (is {near[0]} the same file, misnamed?)") if near else ""
            problems.append(Problem(name, t(f"你的文件夹里没有 {name}：应在 {path}{guess}",
                                            f"{name} not found in your folder: expected at {path}{guess}"),
                                    only_if_blocking=True, kind="missing"))
            continue
        if name.endswith(".py"):
            try:
                compile(path.read_bytes(), str(path), "exec")
            except SyntaxError as exc:
                where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
                line = (exc.text or "").strip()
                problems.append(Problem(name, t(f"{name} 无法解析（语法错误）：{where}：{exc.msg}" + (f"\n    {line}" if line else ""),
                                                f"{name} does not compile: {where}: {exc.msg}" + (f"\n    {line}" if line else "")),
                                        kind="syntax"))
            except ValueError as exc:  # e.g. a NUL byte
                problems.append(Problem(name, t(f"{name} 无法解析：{exc}", f"{name} does not compile: {exc}"), kind="syntax"))
    for name in sorted(present):
        stem = name[:-3] if name.endswith(".py") else None
        if stem and (stem in sys.stdlib_module_names or stem in THIRD_PARTY):
            problems.append(Problem(name, t(
                f"{folder / name} 与 Python 的 {stem} 模块同名，会被错误地导入：请改名（例如 my_{name}）",
                f"{folder / name} has the name of Python's {stem} module and would be imported in its place: "
                f"rename it (e.g. my_{name})"), kind="shadow"))
    return problems


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
        elif problem.kind == "syntax":
            if (problem.file in text or f"'{module}'" in text) and any(
                    sign in text for sign in ("SyntaxError", "IndentationError", "TabError", "does not compile")):
                return problem
        elif problem.file in text or f"'{module}'" in text or imported:
            return problem
    return None
