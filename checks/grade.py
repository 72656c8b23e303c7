"""Grade a class: many learner folders, N boxes at a time, progress while it works.

    python -m checks grade --lab DIR... [--lessons NN...|all] [--out DIR] [-j N] [--unsafe]

Each folder is graded on its own (its own boxes, its own work and log folders, its own report); one that
crashes, hangs or floods output costs only its own result.  Every mistake inside a folder (a missing
schema file, a DDL error, code that reaches into the checker) is that folder's errored checks with a
message, never the end of the class's grading.
"""

from __future__ import annotations

import concurrent.futures
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from checks import report
from checks.runner import ERROR, FAIL, CheckResult, LessonResult
from checks.workdir import LAB_DIR, UsageError
from shared.i18n import t


@dataclass
class Student:
    raw: str                      # the folder as given
    name: str                     # unique in this class: names the report files
    folder: Path | None = None
    results: list[LessonResult] = field(default_factory=list)
    error: str | None = None
    lesson: str = ""              # the lesson being graded now
    seconds: float = 0.0
    parts: list = field(default_factory=list)  # distributed grading: its tasks (checks.distributed.Part)


def student_names(raws: list[str]) -> list[str]:
    """A short name per folder (`class/alice/tasks_lab` -> alice), lengthened with parent folders until
    no two students share one (`class-alice`, `class2-alice`)."""
    parts = [[p for p in Path(raw).resolve().parts if p not in ("/", "")] for raw in raws]
    parts = [p[:-1] if p and p[-1] == "tasks_lab" and len(p) > 1 else p for p in parts]
    depth = [1] * len(raws)
    while True:
        names = ["-".join(p[-d:]) if p else "folder" for p, d in zip(parts, depth)]
        clashes = {n for n in names if names.count(n) > 1}
        if not clashes or all(depth[i] >= len(parts[i]) for i, n in enumerate(names) if n in clashes):
            break
        depth = [d + 1 if names[i] in clashes and d < len(parts[i]) else d for i, d in enumerate(depth)]
    names = [re.sub(r"[^\w.-]", "_", n) for n in names]
    seen: dict[str, int] = {}
    unique = []
    for n in names:  # the same folder given twice
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return unique


def errored(lessons: list[dict], message: str, tampering: bool = False) -> list[LessonResult]:
    """Every check of these lessons as an error with one message: the report keeps its real maximum."""
    results = []
    for lesson in lessons:
        checks = [CheckResult(lesson=lesson["id"], id=c["id"], kind=c.get("kind", "core"), text=c["text"],
                              hint=c["hint"], points=c["points"], status=ERROR, message=message, tampered=tampering)
                  for c in lesson["checks"]]
        results.append(LessonResult(lesson, "", checks, 0.0, problems=[message]))
    return results


def export_commit(repo: Path, ref: str, dest: Path) -> Path:
    """The folder as it was at `ref` (a tag, branch or commit of the learner's git repository), written
    to `dest` by `git archive`: the learner's repository is only read, and no hook or filter of theirs
    runs."""
    import shutil
    import subprocess
    import tarfile
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]
    top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        raise UsageError(t(f"{repo} 不是 git 仓库：--at 需要学习者的提交历史",
                           f"{repo} is not a git repository: --at needs the learner's history"))
    prefix = subprocess.run([*git, "rev-parse", "--show-prefix"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run([*git, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, text=True)
    if commit.returncode != 0:
        raise UsageError(t(f"仓库 {repo} 里没有 {ref}（标签、分支或提交）", f"{repo} has no {ref} (tag, branch or commit)"))
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run([*git, "archive", "--format=tar", commit.stdout.strip(), *([prefix] if prefix else [])],
                             capture_output=True)
    if archive.returncode != 0:
        raise UsageError(f"git archive {ref}: {archive.stderr.decode(errors='replace')[-300:]}")
    import io
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")  # no links out of dest, no devices, no odd modes
    return dest / prefix if prefix else dest


def grade_one(student: Student, lessons: list[dict], data: dict, run_many, at: str | None = None) -> None:
    started = time.monotonic()
    try:
        from checks.cli import _lab_path
        student.folder = _lab_path(student.raw)
        def starting(lesson):
            student.lesson = lesson["id"]
        if at is None:
            student.results = run_many(lessons, data, student.folder, f"grade/{student.name}", on_start=starting)
            return
        for lesson in lessons:  # each lesson from the commit the learner made for it
            ref = at.replace("{NN}", lesson["id"])
            try:
                folder = export_commit(student.folder, ref, LAB_DIR / "grade-src" / student.name / lesson["id"])
            except UsageError as exc:
                student.results += errored([lesson], str(exc))
                continue
            student.results += run_many([lesson], data, folder, f"grade/{student.name}", on_start=starting)
    except UsageError as exc:  # a folder that is missing or not a folder: its own error
        student.error = str(exc)
        student.results = errored(lessons, str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is this student's error, not the class's
        student.error = f"{type(exc).__name__}: {exc}"
        student.results = errored(lessons, student.error)
        traceback.print_exc(file=sys.stderr)
    finally:
        student.lesson, student.seconds = "", time.monotonic() - started


def _progress_line(students: list[Student], started: float) -> str:
    done = sum(1 for s in students if s.results and not s.lesson)
    now = [f"{s.name}:{s.lesson}" for s in students if s.lesson]
    elapsed = time.monotonic() - started
    eta = ""
    if done:
        per = elapsed / done
        eta = t(f"，预计还需 {per * (len(students) - done):.0f}s", f", ETA {per * (len(students) - done):.0f}s")
    return t(f"[{done}/{len(students)} 个文件夹] 用时 {elapsed:.0f}s{eta}  正在：{' '.join(now) or '—'}",
             f"[{done}/{len(students)} folders] {elapsed:.0f}s elapsed{eta}  now: {' '.join(now) or '—'}")


def grade(raws: list[str], lessons: list[dict], data: dict, out: Path, jobs: int, run_many,
          stream=sys.stderr, at: str | None = None) -> list[Student]:
    names = student_names(raws)
    students = [Student(raw, name) for raw, name in zip(raws, names)]
    started = time.monotonic()
    finished = threading.Event()

    def show_progress():
        last = ""
        while not finished.wait(2.0):
            line = _progress_line(students, started)
            if line != last:
                print(line, file=stream, flush=True)
                last = line
    ticker = threading.Thread(target=show_progress, daemon=True)
    ticker.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(grade_one, s, lessons, data, run_many, at): s for s in students}
            for future in concurrent.futures.as_completed(futures):
                s = futures[future]
                future.result()
                write_reports(s, out)
                m = report.marks([c for r in s.results for c in r.checks])
                print(t(f"  完成 {s.name}：{m['score']}/{m['max_score']}（{s.seconds:.0f}s）",
                        f"  done {s.name}: {m['score']}/{m['max_score']} ({s.seconds:.0f}s)"), file=stream, flush=True)
    finally:
        finished.set()
    return students


def write_reports(student: Student, out: Path) -> None:
    source = str(student.folder or student.raw)
    report.write_json(out / f"{student.name}.json", student.results, source, student.error)
    report.write_junit(out / f"{student.name}.xml", student.results, source, student.error)


def status_of(student: Student) -> str:
    if student.error:
        return ERROR
    return report.overall(student.results)


def exit_code(students: list[Student]) -> int:
    return 1 if any(status_of(s) in (FAIL, ERROR) for s in students) else 0
