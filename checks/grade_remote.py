"""The instructor's side of distributed grading: each folder packed and named by its content (key =
sha256(packed bytes) : lessons : kit version), one task per key sent to the grading machines, the stored
results collected, and the same report files a local grade writes."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from checks import grade, report
from checks.gitread import export_commit
from checks.grading_worker import (DELIVERIES, QUEUE, RESULTS, configure, grade_folder, grading_key, kit_version,
                                   results_store)
from checks.packing import SIZE_LIMIT, PackRefused, pack_folder, wire_to_results
from checks.results import errored
from checks.selection import load, select
from checks.workdir import UsageError
from shared.i18n import t


@dataclasses.dataclass
class Part:
    """One grading task's share of a student: all the lessons of their folder, or (--at REF with {NN})
    one lesson from the commit they made for it."""
    student: object
    lessons: list[str]
    results: list | None = None  # filled when its result is back (or at once, for an error of its own)


def _sources(student, lessons: list[dict], at: str | None, tmp: Path) -> list[tuple[list[dict], Path | str]]:
    """(lessons, folder to pack) per part; a lesson whose commit cannot be exported gets its error text
    instead of a folder.  Without --at: the folder itself, all lessons in one part."""
    if at is None:
        return [(lessons, student.folder)]
    if "{NN}" not in at:
        return [(lessons, export_commit(student.folder, at, tmp / student.name / "all"))]
    parts = []
    for lesson in lessons:
        try:
            parts.append(([lesson], export_commit(student.folder, at.replace("{NN}", lesson["id"]),
                                                  tmp / student.name / lesson["id"])))
        except UsageError as exc:
            parts.append(([lesson], str(exc)))
    return parts


def pack_class(students: list, lessons: list[dict], size_limit: int, kit: str,
               at: str | None = None) -> tuple[dict, dict]:
    """key -> parts, key -> packed bytes.  A folder (or a commit) that cannot be packed gets its error
    here and is left out; the rest of the class goes on."""
    jobs: dict[str, list[Part]] = {}
    packed: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="tasklab-pack-") as tmp:
        for s in students:
            s.parts = []
            try:
                s.folder = grade.folder_as_given(s.raw)
                sources = _sources(s, lessons, at, Path(tmp))
            except (UsageError, OSError) as exc:
                s.error = str(exc) if isinstance(exc, UsageError) else t("cannot read the folder: {exc}", exc=exc)
                s.results = errored(lessons, s.error)
                continue
            for part_lessons, source in sources:
                part = Part(s, [lesson["id"] for lesson in part_lessons])
                s.parts.append(part)
                if isinstance(source, str):  # this lesson's commit could not be exported
                    part.results = errored(part_lessons, source)
                    continue
                try:
                    data = pack_folder(source, size_limit)
                except (PackRefused, OSError) as exc:
                    message = str(exc) if isinstance(exc, PackRefused) else t("cannot read the folder: {exc}", exc=exc)
                    part.results = errored(part_lessons, message)
                    if len(sources) == 1:
                        s.error = message
                    continue
                key = grading_key(data, part.lessons, kit)
                jobs.setdefault(key, []).append(part)  # identical folders: graded once, reported for each
                packed.setdefault(key, data)
            if all(p.results is not None for p in s.parts):  # nothing of theirs to send
                s.results = [r for p in s.parts for r in p.results]
    return jobs, packed


def _progress(done: int, total: int, started: float, hosts: dict[str, int], busy: dict[str, str]) -> str:
    elapsed = time.monotonic() - started
    eta = ""
    if done:
        left = elapsed / done * (total - done)
        eta = t(", ETA {left:.0f}s", left=left)
    names = sorted(set(hosts) | set(busy.values()))
    workers = " ".join(f"{h}:{hosts.get(h, 0)}" + (t("(busy)") if h in busy.values() else "")
                       for h in names)
    return t("[{done}/{total} folders] {elapsed:.0f}s elapsed{eta}  workers: {workers}", done=done, total=total,
             elapsed=elapsed, eta=eta, workers=workers or t('— (no worker has taken any yet)'))


def submit_and_collect(folders: list, lessons: list[str], out: Path, broker_url: str, result_url: str | None = None,
                       size_limit: int = SIZE_LIMIT, force: bool = False, timeout: float | None = None,
                       stream=sys.stderr, at: str | None = None) -> list:
    """Grade these folders on whatever workers serve the broker; write <name>.json and <name>.xml into
    `out` as `python -m checks grade` does, and return the students (checks.grade.Student) as it does.
    A folder graded before with the same bytes, lessons and kit is not sent again unless `force`.
    `timeout`: seconds to wait in all; folders not back by then get an error (None: wait until done).
    `at`: grade a git ref of each folder instead of its files (as local `grade --at`; "{NN}" in it: each
    lesson from its own commit, one task per lesson)."""
    import redis

    data = load()
    chosen = select(data, lessons, allow_planned=lessons == ["all"])
    ids = [lesson["id"] for lesson in chosen]
    raws = [str(f) for f in folders]
    students = [grade.Student(raw, name) for raw, name in zip(raws, grade.student_names(raws), strict=True)]
    configure(broker_url, result_url)
    store = results_store()
    out = Path(out)
    started = time.monotonic()

    def finished(s, how: str) -> None:
        grade.write_reports(s, out)  # the local code path: same files, same shapes
        m = report.marks([c for r in s.results for c in r.checks])
        print(t("  done {name}: {score}/{max_score} ({seconds:.0f}s, {how})", name=s.name, score=m['score'], how=how,
                max_score=m['max_score'], seconds=s.seconds), file=stream, flush=True)

    jobs, packed = pack_class(students, chosen, size_limit, kit_version(), at)
    order = {lid: n for n, lid in enumerate(ids)}

    def complete(s) -> bool:
        """Every part of the student back: their results, in lesson order, and their report files."""
        if s.parts and all(p.results is not None for p in s.parts):
            s.results = sorted((r for p in s.parts for r in p.results), key=lambda r: order[r.lesson["id"]])
            return True
        return not s.parts

    for s in students:
        if complete(s) and not any(p.student is s for group in jobs.values() for p in group):
            finished(s, t("not sent"))
    try:
        for key, group in jobs.items():
            if force:
                store.delete(RESULTS + key, DELIVERIES + key)
            elif store.exists(RESULTS + key):
                continue  # graded before: same bytes, lessons and kit
            grade_folder.apply_async((key, group[0].student.name, base64.b64encode(packed[key]).decode("ascii"),
                                      group[0].lessons), queue=QUEUE, retry=True)
    except redis.RedisError as exc:
        raise UsageError(t("cannot reach the broker: {exc}", exc=exc)) from None
    except Exception as exc:  # kombu's own connection errors
        raise UsageError(t("cannot hand the tasks to the broker: {exc}", exc=exc)) from None
    del packed

    pending, total = set(jobs), len(students)
    done = sum(1 for s in students if not any(p.student is s for g in jobs.values() for p in g))
    hosts: dict[str, int] = {}
    last_line, last_shown, warned = "", 0.0, False
    while pending:
        try:
            keys = sorted(pending)
            for key, value in zip(keys, store.mget([RESULTS + k for k in keys]), strict=True):
                if value is None:
                    continue
                entry = json.loads(value)
                for part in jobs[key]:
                    s = part.student
                    part.results, error = wire_to_results(entry["result"], data, str(s.folder))
                    if error and not part.results:  # the worker could not start: every check, errored
                        part.results = errored([lesson for lesson in chosen if lesson["id"] in part.lessons], error)
                    s.error = s.error or error
                    s.seconds = (s.seconds or 0) + entry["seconds"]
                    if complete(s):
                        finished(s, entry["worker"])
                        done += 1
                hosts[entry["worker"]] = hosts.get(entry["worker"], 0) + len(jobs[key])
                if entry["result"].get("retry"):
                    store.delete(RESULTS + key)  # a worker of another kit version: not this folder's verdict
                pending.discard(key)
            if pending and time.monotonic() - last_shown >= 2.0:
                busy = {}
                with store.pipeline() as pipe:
                    for k in sorted(pending):
                        pipe.lindex(DELIVERIES + k, -1)
                    for k, last in zip(sorted(pending), pipe.execute(), strict=True):
                        if last:
                            busy[k] = json.loads(last)["host"]
                line = _progress(done, total, started, hosts, busy)
                if line != last_line:
                    print(line, file=stream, flush=True)
                last_line, last_shown, warned = line, time.monotonic(), False
        except redis.ConnectionError:
            if not warned:
                print(t("  the broker is unreachable for now, still waiting…"),
                      file=stream, flush=True)
            warned = True
        if timeout is not None and time.monotonic() - started > timeout:
            message = t("not graded within {timeout:.0f}s (no worker?)", timeout=timeout)
            for key in sorted(pending):
                for part in jobs[key]:
                    part.results = errored([lesson for lesson in chosen if lesson["id"] in part.lessons], message)
                    part.student.error = message
                    if complete(part.student):
                        finished(part.student, t("timed out"))
            break
        if pending:
            time.sleep(0.5)
    return students
