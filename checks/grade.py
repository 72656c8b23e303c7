"""Grade a class: many learner folders, N boxes at a time, progress while it works.

    python -m checks grade --lab DIR... [--lessons NN...|all] [--out DIR] [-j N] [--unsafe] [--repeat N]

--repeat N grades each folder N times per lesson: a check's points count only if it passed every run, and
its report carries how many runs it passed (checks.results.combine).

Each folder is graded on its own (its own boxes, its own work and log folders, its own report); one that
crashes, hangs or floods output costs only its own result.  Every mistake inside a folder (a missing
schema file, a DDL error, code that reaches into the checker) is that folder's errored checks with a
message, never the end of the class's grading.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import re
import sys
import threading
import time
import traceback
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from checks import boxfiles, gitread, report
from checks.results import ERROR, FAIL, LessonResult, combine, errored
from checks.sandbox import STOP
from checks.session import run_many
from checks.workdir import STATE_DIR, UsageError, disk_full
from shared.i18n import t


@dataclass
class Student:
    raw: str                      # the folder as given
    name: str                     # unique in this class: names the report files
    folder: Path | None = None
    results: list[LessonResult] = field(default_factory=list)
    error: str | None = None
    lesson: str = ""              # the lesson being graded now
    run: str = ""                 # grade --repeat: which of the N runs, e.g. " (3/20)"
    seconds: float = 0.0
    parts: list = field(default_factory=list)  # distributed grading: its tasks (checks.grade_remote.Part)


def student_names(raws: list[str]) -> list[str]:
    """A short name per folder (`class/alice/tasks_lab` -> alice), lengthened with parent folders until
    no two students share one (`class-alice`, `class2-alice`).  Names become report file names, so only
    letters (of any script: a class in China keeps its Chinese names), digits, `_`, `.` and `-` stay (never first: `-x`
    or `.x` would read as an option or a hidden file; never a space, a slash or a control character); a
    name that cleaning changed, or that still clashes, gets a short hash of its folder's path (`bob_-3f9a1c`),
    the same every time — so `bob?` and `bob!` never share a report."""
    paths = [Path(raw).expanduser().absolute() for raw in raws]
    parts = [[p for p in path.parts if p not in ("/", "")] for path in paths]
    parts = [p[:-1] if p and p[-1] == "tasks_lab" and len(p) > 1 else p for p in parts]
    depth = [1] * len(raws)
    while True:
        names = ["-".join(p[-d:]) if p else "folder" for p, d in zip(parts, depth, strict=True)]
        clashes = {n for n in names if names.count(n) > 1}
        if not clashes or all(depth[i] >= len(parts[i]) for i, n in enumerate(names) if n in clashes):
            break
        depth = [d + 1 if names[i] in clashes and d < len(parts[i]) else d for i, d in enumerate(depth)]
    names = [unicodedata.normalize("NFC", n) for n in names]  # é typed one way or the other is one é
    cleaned = [re.sub(r"^[-.]", "_", re.sub(r"[^\w.-]", "_", n))[:60] for n in names]
    clashing = {c for c in cleaned if cleaned.count(c) > 1}
    for i, (name, clean) in enumerate(zip(names, cleaned, strict=True)):
        if clean != name or clean in clashing:
            cleaned[i] = f"{clean}-{hashlib.sha256(str(paths[i]).encode(errors='surrogateescape')).hexdigest()[:6]}"
    seen: dict[str, int] = {}
    unique = []
    for n in cleaned:  # the same folder given twice
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return unique


TEMP_PREFIX = "tasklab-grade-"  # + pid: a grading's copies, exports, work and log folders (swept once it is gone)
SCRATCH = ("work", "logs", "intake", "grade-src")  # STATE_DIR/<kind>/grade/<scope>: what grading one folder leaves


def scope_of(student: Student, keep: bool) -> str:
    """The folder name under STATE_DIR/*/grade/ for this student's grading: plain when kept (--keep), else
    named after this process, so a grader that was killed leaves folders the next one can tell are gone."""
    return student.name if keep else f"{TEMP_PREFIX}{os.getpid()}-{student.name}"


def clean_up(scope: str) -> None:
    """A folder's copies gone (what cannot be removed now, a later grade start sweeps: never a lost grade)."""
    for kind in SCRATCH:
        with contextlib.suppress(OSError):
            boxfiles.remove(STATE_DIR / kind / "grade" / scope)


def sweep_leftovers(places: list[Path] | None = None) -> list[Path]:
    """Folders of graders (or pool children) killed before their clean-up: removed when the process
    named in them is gone (this machine's only), never a live one's."""
    removed = []
    for place in places or [STATE_DIR / kind / "grade" for kind in SCRATCH]:
        for path in place.glob(f"{TEMP_PREFIX}*") if place.is_dir() else []:
            pid = path.name[len(TEMP_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):  # another sweep (a grading worker beside this one) got there first
                    boxfiles.remove(path)
                removed.append(path)
    return removed


def folder_as_given(raw: str) -> Path:
    """The folder as the instructor named it: made absolute, never resolved (a student's folder that is a
    link is refused when it is taken in, not followed here)."""
    path = Path(raw).expanduser().absolute()
    if not os.path.lexists(path):
        raise UsageError(t("--lab {raw}: no such folder", raw=raw))
    return path


def grade_one(student: Student, lessons: list[dict], data: dict, at: str | None = None, keep: bool = False,
              times: int = 1) -> None:
    started = time.monotonic()
    scope = scope_of(student, keep)
    try:
        student.folder = folder_as_given(student.raw)

        def starting(lesson):
            student.lesson = lesson["id"] + student.run

        def graded(lessons_now: list[dict], folder: Path) -> list[LessonResult]:
            """The lessons run `times` times; a check's points only if it passed every run."""
            series = []
            for number in range(1, times + 1):
                student.run = f" ({number}/{times})" if times > 1 else ""
                series.append(run_many(lessons_now, data, folder, f"grade/{scope}", on_start=starting,
                                       skip_unreached=True))
            return combine(series) if times > 1 else series[0]
        if at is None:
            student.results = graded(lessons, student.folder)
            return
        for lesson in lessons:  # each lesson from the commit the learner made for it
            ref = at.replace("{NN}", lesson["id"])
            try:
                folder = gitread.export_commit(student.folder, ref,
                                               STATE_DIR / "grade-src" / "grade" / scope / lesson["id"])
            except UsageError as exc:
                student.results += errored([lesson], str(exc))
                continue
            student.results += graded([lesson], folder)
    except UsageError as exc:  # a folder that is missing, not a folder, or refused as data: its own error
        student.error = str(exc)
        student.results = errored(lessons, str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is this student's error, not the class's
        if isinstance(exc, OSError) and disk_full(exc):
            raise   # ... except a full disk: the machine's, so grading stops with one line (checks.cli)
        student.error = f"{type(exc).__name__}: {exc}"
        student.results = errored(lessons, student.error)
        traceback.print_exc(file=sys.stderr)
    finally:
        student.lesson, student.seconds = "", time.monotonic() - started
        if not keep:
            clean_up(scope)


def _progress_line(students: list[Student], started: float) -> str:
    done = sum(1 for s in students if s.results and not s.lesson)
    now = [f"{s.name}:{s.lesson}" for s in students if s.lesson]
    elapsed = time.monotonic() - started
    eta = ""
    if done:
        per = elapsed / done
        eta = t(", ETA {per:.0f}s", per=per * (len(students) - done))
    return t("[{done}/{n_students} folders] {elapsed:.0f}s elapsed{eta}  now: {now}", done=done, elapsed=elapsed,
             n_students=len(students), eta=eta, now=' '.join(now) or '—')


def grade(raws: list[str], lessons: list[dict], data: dict, out: Path, jobs: int, stream=sys.stderr,
          at: str | None = None, keep: bool = False, times: int = 1) -> list[Student]:
    """Grade every folder, `jobs` at a time.  TERM or Ctrl-C at any moment stops every box under way
    (sandbox.STOP), grades nothing more and leaves no process behind; what was finished is reported."""
    names = student_names(raws)
    students = [Student(raw, name) for raw, name in zip(raws, names, strict=True)]
    started = time.monotonic()
    finished = threading.Event()
    STOP.clear()
    sweep_leftovers()  # what a grader killed earlier left behind

    def show_progress():
        last = ""
        while not finished.wait(2.0):
            line = _progress_line(students, started)
            if line != last:
                print(line, file=stream, flush=True)
                last = line
    ticker = threading.Thread(target=show_progress, daemon=True)
    ticker.start()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = {pool.submit(grade_one, s, lessons, data, at, keep, times): s for s in students}
        for future in concurrent.futures.as_completed(futures):
            s = futures[future]
            future.result()
            write_reports(s, out)
            m = report.marks([c for r in s.results for c in r.checks])
            print(t("  done {name}: {score}/{max_score} ({seconds:.0f}s)", name=s.name, score=m['score'],
                    max_score=m['max_score'], seconds=s.seconds), file=stream, flush=True)
    except BaseException:  # TERM, Ctrl-C: every box stops within a moment, nothing new starts
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        print(t("stopped: the gradings under way were ended; unfinished folders have no report"), file=stream,
              flush=True)
        raise
    finally:
        pool.shutdown(wait=True)
        STOP.clear()  # every grading has ended: a later run in this process (a grading worker's next) may start
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


def print_table(students: list[Student]) -> None:
    """The score table `python -m checks grade` prints: one line per student."""
    print(t("student              score     status  bonus"))
    for s in students:
        m = report.marks([c for r in s.results for c in r.checks])
        flag = t("  tampering suspected") if any(c.tampered for r in s.results for c in r.checks) else ""
        flaky = report.flaky_checks(report.to_dict(s.results, s.name)["tests"])
        flag += t("  flaky: {checks}", checks=", ".join(flaky)) if flaky else ""
        print(f"{padded(s.name, 20)} {m['score']:>3}/{m['max_score']:<5} {status_of(s):<7} +{m['bonus']}{flag}")


def padded(text: str, width: int) -> str:
    """`text` filled with spaces to `width` terminal columns: a wide character (a Chinese one) takes two."""
    columns = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return text + " " * max(0, width - columns)
