"""Run a lesson's checks: each round of its verifiers in a box, every verdict judged as it comes back on the
verdict channel, a check that hangs costing only itself; then the earlier lessons' checks it re-runs."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from checks import box as B
from checks import boxfiles
from checks.results import ERROR, FAIL, SKIPPED, TIMEOUT, LessonResult, new_result
from checks.sandbox import STOP, Stopped, boxing, run_script, start_inbox, stop_box, stop_leftovers, verifiers_dir
from checks.servers import needs_exclusive
from checks.supersede import checks_to_run, lesson_by_id, mark_superseded, regressions_of, superseded
from checks.verdicts import Reader, foreign
from checks.workdir import verifier_files
from shared import figures, servicectl
from shared.i18n import t

LANGS = ("zh", "en")
SETUP_LIMIT = 60.0     # seconds a lesson may take before its first check starts (servers, processes, imports)
TEARDOWN_LIMIT = 60.0  # seconds it may take to end after its last check (stopping what it started)


@dataclass
class _Round:
    """One run of the lesson's verifiers: the verified records and how it ended."""
    records: list[dict]
    output: str
    ended: str            # "exit", "timeout", "output", "disk"
    current: str | None   # the check under way when it was stopped
    limit: float = 0.0
    forged: int = 0


def _state(records: list[dict], order: list[str]) -> tuple[str | None, bool, set[str]]:
    """(the check the clock runs for, whether any check started yet, the checks reported) so far.
    Between two checks the clock runs for the next one: its limit covers getting to it."""
    reported = {r["id"] for r in records if r["type"] == "result"}
    current, started = None, False
    for record in records:
        if record["type"] == "start":
            current, started = record["id"], True
    if current in reported:
        current = next((c for c in order if c not in reported), None) if started else None
    return current, started, reported


def _run_round(lesson: dict, workdir: Path, log_dir: Path, pending: list[str], limits: dict[str, float],
               schema_upto: str, boxed: bool, staged: Path | None = None) -> _Round:
    """Start the lesson in a box (or bare, LAB_BOX=off) for these checks and judge what comes back on
    the verdict channel.  Each check gets its own limit from when it starts (tasks.json's timeout); the
    time before the first check and after the last is bounded too; so are the output and the disk used.
    When a limit runs out the whole box goes, every process in it with it."""
    verifiers = list(dict.fromkeys(c["verifier"] for c in lesson["checks"] if c["id"] in pending))
    if all(c.get("needs_processes") is False for c in lesson["checks"] if c["id"] in pending):
        lesson = dict(lesson, processes=[])  # none of these checks uses the lesson's worker: start none
    spec = {"lesson": lesson, "schema_upto": schema_upto, "verifiers": verifiers, "log_dir": str(log_dir),
            "verifiers_dir": str(verifiers_dir(lesson)),
            "env": {"TASKLAB_LOG_DIR": str(log_dir), "TASKLAB_LESSON": lesson["id"],
                    "TASKLAB_CHECKS": ",".join(pending)}}
    started = start_inbox(lesson, workdir, log_dir, spec, boxed, subprocess.PIPE, staged)
    proc, key, token, channel_r, cgroups, spec_path = started
    reader = Reader(key, token, B.RECORD_LIMIT, B.CHANNEL_LIMIT)
    records: list[dict] = []
    output = bytearray()
    ended, current, limit = "exit", None, 0.0
    seen_state, since, last_disk_look = None, time.monotonic(), 0.0
    streams = {proc.stdout.fileno(): "out", channel_r: "channel"}
    try:
        while streams:
            ready, _, _ = select.select(list(streams), [], [], 0.1)
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:
                    del streams[fd]
                elif streams[fd] == "channel":
                    records += reader.feed(data)
                else:
                    output += data
            current, started, reported = _state(records, pending)
            state = (current, frozenset(reported))
            if state != seen_state:  # progress: a check started or reported; its clock starts now
                seen_state, since = state, time.monotonic()
            limit = limits.get(current, SETUP_LIMIT) if current is not None else (
                TEARDOWN_LIMIT if started else SETUP_LIMIT)
            if STOP.is_set():
                ended = "stopped"
            elif len(output) > B.OUTPUT_LIMIT or reader.overflowed:
                ended = "output"
            elif boxed and time.monotonic() - last_disk_look > 0.5:
                last_disk_look = time.monotonic()
                if B.usage_bytes(workdir, log_dir) > B.DISK_LIMIT:
                    ended = "disk"
            if ended == "exit" and time.monotonic() - since > limit:
                ended = "timeout"
            if ended != "exit":
                stop_box(proc)
                break
        proc.wait()
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): never leave the box behind
            stop_box(proc)
        os.close(channel_r)
        proc.stdout.close()
        stop_leftovers(token)
        B.remove_cgroups(cgroups)
        spec_path.unlink(missing_ok=True)
    text = output[: B.OUTPUT_LIMIT].decode("utf-8", errors="replace")
    boxfiles.append(log_dir / "box.log", text)
    if ended == "stopped":
        raise Stopped()
    return _Round(records, text, ended, current, limit, reader.forged)




def run_checks(lesson: dict, workdir: Path, log_dir: Path, checks: list[dict], by_id: dict,
               schema_upto: str, boxed: bool, notices: list[str] | None = None,
               staged: Path | None = None) -> list[str]:
    """Run the lesson until each of these checks has a verdict.  A check that overruns its limit is
    TIMEOUT and the lesson is started again (a new box, its folder made afresh from `staged`) for the
    checks it had not reached, so one hang costs one check, not every check after it.  Returns problems
    with the folder, said once."""
    boxfiles.fresh_dir(log_dir)
    pending = [c["id"] for c in checks]
    limits = {c["id"]: float(c["timeout"]) for c in checks}
    probed = False
    while pending:
        result = _run_round(lesson, workdir, log_dir, pending, {k: limits[k] for k in pending}, schema_upto, boxed,
                            staged)
        if notices is not None:
            notices += [r["message"] for r in result.records if r["type"] == "notice" and r["message"] not in notices]
        problem = next((r for r in result.records if r["type"] == "problem"), None)
        if problem is not None:  # the folder's schema or a process that never became ready: every check
            for check_id in pending:
                by_id[check_id].status, by_id[check_id].message = ERROR, problem["message"]
            return [problem["message"]] if problem.get("kind") == "schema" else []
        results = {}
        for r in result.records:
            if r["type"] == "result" and r["id"] in pending:
                results.setdefault(r["id"], r)
        exits = {r["verifier"]: r["code"] for r in result.records if r["type"] == "exit"}
        tampered = (result.forged > 0 or foreign(result.records) > 0
                    or any(not r.get("intact", False) for r in results.values()))
        stuck = result.current if result.ended != "exit" and result.current in pending else None
        for check_id in list(pending):
            seen = results.get(check_id)
            if seen is None:
                continue
            pending.remove(check_id)
            res = by_id[check_id]
            res.status, res.seconds, res.notes = seen["status"], float(seen["seconds"]), list(seen["notes"])
            res.message = seen["message"] or (res.notes[0] if res.status == FAIL and res.notes else "")
            res.figures = figures.clean_all(seen.get("figures"))
            hint = seen.get("hint")  # a finding that knows its cause brings that cause's hint (shared.tap.Because),
            if res.status == FAIL and isinstance(hint, str) and hint.strip():  # said in the run's language
                res.hint = dict.fromkeys(LANGS, hint[:2000])
            verifier = next(c["verifier"] for c in checks if c["id"] == check_id)
            code = exits.get(verifier)
            fails = any(results[c]["status"] == FAIL for c in results
                        if next(x["verifier"] for x in checks if x["id"] == c) == verifier)
            if tampered:
                res.status, res.notes, res.tampered = ERROR, _tail(result.output), True
                res.message = t("tampering suspected: the checker's own functions were replaced, unsigned lines "
                                "appeared on the verdict channel, or verdicts came from a process other than the "
                                "checker (a fork of it)")
            elif result.ended == "exit" and code != 0 and not fails:
                # Every line said ok, yet the verifier failed (or its end was never seen): distrust the passes.
                res.status, res.notes = ERROR, _tail(result.output)
                res.message = (f"{verifier} exited with code {code} after reporting" if code is not None else
                               t("{verifier} never ended normally after reporting", verifier=verifier))
            elif result.ended != "exit" and stuck is None and code is None and not fails:
                res.status, res.notes = ERROR, _tail(result.output)
                res.message = f"{verifier} did not exit within {result.limit:g}s after reporting"
        if not pending:
            break
        if result.ended in ("timeout", "output", "disk") and stuck is not None:
            res = by_id[stuck]
            if result.ended == "timeout":
                res.status, res.seconds = TIMEOUT, result.limit
                res.message = t("ran past this check's {limit:g}s limit", limit=result.limit)
            elif result.ended == "output":
                res.status = ERROR
                res.message = t("output limit: over {output_limit} MB printed, or an over-long record on the verdict "
                                "channel: the run was stopped", output_limit=B.OUTPUT_LIMIT >> 20)
            else:
                res.status = ERROR
                res.message = t("wrote over {disk_limit} MB to disk: the run was stopped",
                                disk_limit=B.DISK_LIMIT >> 20)
            res.notes = _tail(result.output)
            pending.remove(stuck)
            if result.ended == "timeout" and pending and not probed:
                probed = True
                hung = _hanging_imports(lesson, workdir, log_dir, result.limit, staged)
                if hung:  # every check importing it would hang in turn: said once, not waited out again
                    message = t("importing {hung}.py never finishes: code at a module's top level runs at import, "
                                "and an endless loop there blocks every check. Move it under `if __name__ == "
                                "\"__main__\":`. The checks after {stuck} were not run.", hung=hung[0], stuck=stuck)
                    for check_id in pending:
                        by_id[check_id].status, by_id[check_id].message = ERROR, message
                    return [message]
            boxfiles.append(log_dir / "box.log",
                            f"\n--- {stuck} {result.ended}; the lesson starts again for {', '.join(pending)} ---\n")
            continue
        for check_id in pending:  # it ended (or hung outside any check) without reporting these
            res = by_id[check_id]
            if result.ended == "timeout":
                res.status = TIMEOUT
                res.message = t("made no progress for {limit:g}s outside any check", limit=result.limit)
            elif result.ended in ("output", "disk"):
                res.status = ERROR
                res.message = t("output or disk use over its limit: the run was stopped")
            else:
                verifier = next(c["verifier"] for c in checks if c["id"] == check_id)
                code = exits.get(verifier)
                res.status = ERROR
                res.message = (t("{verifier} exited with code {code} without reporting this check", verifier=verifier,
                                 code=code)
                               if code is not None else
                               t("{verifier} ended without reporting this check", verifier=verifier))
            res.notes = _tail(result.output)
        break
    return []


def _hanging_imports(lesson: dict, workdir: Path, log_dir: Path, limit: float, staged: Path | None) -> list[str]:
    """The lesson's modules in the folder whose import alone outlasts a check's whole `limit`
    (checks/hung_imports.py, in a box of its own).  Its answer is read back as data: capped, no link
    followed, and only names of the lesson's own modules are believed."""
    folder = staged or workdir
    names = [n[:-3] for n in lesson.get("files", []) if n.endswith(".py") and (folder / n).is_file()]
    if not names:
        return []
    out = log_dir / "hung-imports.json"
    script = str(Path(__file__).resolve().parent / "hung_imports.py")
    # Bounded too: the imports run learner code, which may stop this script itself (SIGSTOP, ptrace); then no
    # answer comes, and the checks after the hang are run and timed one by one as usual.
    run_script(dict(lesson, services=[]), workdir, log_dir, [script, str(out), f"{limit:g}", *names], staged=staged,
               limit=limit * len(names) + SETUP_LIMIT)
    try:
        hung = json.loads(boxfiles.read(out, 64 * 1024))["hung"]
        return [name for name in hung if name in names]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _tail(text: str, lines: int = 15) -> list[str]:
    return text.rstrip().splitlines()[-lines:]


def run_lesson(lesson: dict, workdir: Path, log_dir: Path, source: str = "reference",
               only: set[str] | None = None, lessons: list[dict] | None = None,
               schema_upto: str | None = None) -> LessonResult:
    """Run a lesson's checks, then its regressions: the earlier lessons' checks it names, run by their
    own verifiers against this same folder (with this lesson's whole schema).

    `only` runs just those check ids (the rest are reported SKIP without running): the mutant tests use
    it, because a mutant only has to prove its own checks fail.  `schema_upto`: the folder has moved on to
    that lesson, so its whole schema is applied (its later lessons' tables are there)."""
    started = time.monotonic()
    boxfiles.remove(log_dir)  # each run's logs are its own: an earlier run's lines are never read as this one's
    own = [new_result(lesson["id"], c) for c in lesson["checks"]]
    earlier = regressions_of(lesson, lessons)
    if only is not None:
        unknown = only - {r.id for r in own} - {c["id"] for checks in earlier.values() for c in checks}
        if unknown:
            raise ValueError(f"lesson {lesson['id']} has no check or regression {sorted(unknown)}")
    upto = max(lesson["id"], schema_upto or lesson["id"])
    # The folder as the host made it is set aside where no box can write; every box gets a fresh copy.
    staged = workdir.with_name(f".{workdir.name}.staged")
    boxfiles.remove(staged)
    boxfiles.private_dir(workdir.parent)  # what boxes write lives in folders no other user can enter
    boxfiles.private_dir(log_dir.parent)
    workdir.rename(staged)
    try:
        gone = superseded(own, lesson, lessons, upto)
        result = _run_guarded(lesson, workdir, log_dir, own, checks_to_run(only, own, gone), upto, staged)
        mark_superseded(own, gone)
        for earlier_id, checks in earlier.items():
            regression = dict(lesson_by_id(earlier_id, lessons), checks=checks)
            rows = [new_result(earlier_id, c, regression=True) for c in checks]
            gone = superseded(rows, regression, lessons, upto)
            for verifier in verifier_files(regression):  # the earlier lesson's verifiers, beside the folder's files
                shutil.copy2(verifier, staged / verifier.name)
            # Beside this lesson's logs, not inside them: a folder a box wrote never holds the host's next one.
            regression_logs = log_dir.with_name(f"{log_dir.name}-regression-{earlier_id}")
            boxfiles.remove(regression_logs)
            done = _run_guarded(regression, workdir, regression_logs, rows, checks_to_run(only, rows, gone), upto,
                                staged)
            mark_superseded(rows, gone)
            result.checks += done.checks
            result.logs += done.logs
    finally:
        if not workdir.exists():  # nothing ran (or it stopped early): the folder goes back where it was
            staged.rename(workdir)
        else:
            boxfiles.remove(staged)
    result.source, result.seconds = source, time.monotonic() - started
    return result


def _run_guarded(lesson: dict, workdir: Path, log_dir: Path, results: list, only: set[str] | None,
                 schema_upto: str, staged: Path | None = None) -> LessonResult:
    """One lesson's checks in `results`: in a box with servers of its own, or (LAB_BOX=off, or no box
    here) on the kit's shared servers under the services lock."""
    started = time.monotonic()
    selected = None if only is None else only & {r.id for r in results}
    if selected is not None and not selected:  # nothing of this lesson asked for: start nothing
        for r in results:
            r.status, r.message = SKIPPED, "not selected"
        return LessonResult(lesson, "", results, 0.0)
    boxed = boxing() == "on"
    if lesson.get("services") and not boxed:
        with servicectl.in_use(exclusive=needs_exclusive(lesson, selected)):
            servicectl.up(lesson["services"])  # ServiceError (a service that cannot start) propagates
            return _run_lesson(lesson, workdir, log_dir, "", started, results, selected, schema_upto, boxed, staged)
    return _run_lesson(lesson, workdir, log_dir, "", started, results, selected, schema_upto, boxed, staged)


def _run_lesson(lesson, workdir, log_dir, source, started, results, only=None, schema_upto=None,
                boxed=False, staged=None) -> LessonResult:
    by_id = {r.id: r for r in results}
    checks = []
    for check in lesson["checks"]:
        if only is not None and check["id"] not in only:
            by_id[check["id"]].status, by_id[check["id"]].message = SKIPPED, "not selected"
            continue
        checks.append(check)
    notices: list[str] = []
    problems = run_checks(lesson, workdir, log_dir, checks, by_id, schema_upto or lesson["id"], boxed, notices,
                          staged)
    verifier_logs = (log_dir / f"{Path(v).stem}.log" for v in dict.fromkeys(c["verifier"] for c in checks))
    logs = [log_dir / "box.log", *verifier_logs]
    logs += [log_dir / f"{p['name']}.log" for p in lesson.get("processes", [])]
    return LessonResult(lesson, source, results, time.monotonic() - started, logs, notices, problems)
