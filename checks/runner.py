"""Run a lesson's verifiers in a work dir and turn their TAP lines into one result per check."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from checks.workdir import verifier_files
from shared.manifest import KIT_ROOT
from shared.i18n import t
from shared.proc import Process
from shared.tap import START_MARK

TAP_LINE = re.compile(r"^(not ok|ok)\s+\d+\s+-\s+(\d\d\.\d+)\b(.*?)(?:\s+#\s*(SKIP|TODO)\b\s*(.*))?$", re.I)
OUTPUT_CAP = 500  # characters of output kept per check, as in Exercism's results.json

PASS, FAIL, ERROR, TIMEOUT, SKIPPED = "pass", "fail", "error", "timeout", "skipped"
NOT_PASSED = (FAIL, ERROR, TIMEOUT)


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
    seconds: float = 0.0
    message: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> int:
        return self.points if self.status == PASS else 0

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
    notices: list[str] = field(default_factory=list)  # e.g. schema lines the server could not answer
    problems: list[str] = field(default_factory=list)  # what is wrong with the learner's folder, said once

    @property
    def status(self) -> str:
        if any(c.status in NOT_PASSED for c in self.checks):
            return FAIL
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


def verifier_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    # The work dir comes first (sys.path[0] is the verifier's own folder); the kit root after it.
    env["PYTHONPATH"] = str(KIT_ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Asserts are how checks fail: a verifier never runs optimised (tap.main_guard refuses -O as well).
    env.pop("PYTHONOPTIMIZE", None)
    env.update(extra or {})
    return env


SETUP_LIMIT = 60.0     # seconds a verifier may take before its first check starts (imports, warm-up)
TEARDOWN_LIMIT = 60.0  # seconds it may take to exit after its last check (stopping what it started)
RUN_MARK = "LAB_RUN_ID"  # every process a verifier starts inherits this mark; leftovers are found by it


def _processes_marked(token: str) -> list[int]:
    """Pids of live processes whose environment carries this run's mark (the verifier's descendants,
    double-forked daemons included, unless they scrubbed their environment)."""
    needle = f"{RUN_MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def stop_leftovers(token: str) -> list[int]:
    """SIGKILL every process that still carries the run's mark; return their pids."""
    killed = []
    for _ in range(5):  # a dying parent may fork once more: look again until none is left
        pids = _processes_marked(token)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += pids
        time.sleep(0.1)
    return sorted(set(killed))


@dataclass
class _Round:
    """One run of a verifier process: its output and how it ended."""
    output: str
    code: int | None          # exit code, None when the runner stopped it
    timed_out: str | None     # the check under way when its limit ran out ("" before the first or after the last)
    limit: float = 0.0


def _progress(text: str, order: list[str]) -> tuple[str | None, float | None, set[str]]:
    """(the check the clock runs for, whether any check started yet, the checks reported) so far.
    Between two checks the clock runs for the next one: its limit covers getting to it."""
    reported = set(parse_tap(text))
    current, started = None, False
    for line in text.splitlines():
        if line.startswith(START_MARK):
            current, started = line[len(START_MARK):].strip(), True
    if current in reported:
        current = next((c for c in order if c not in reported), None) if started else None
    return current, started, reported


def _run_round(verifier: str, workdir: Path, limits: dict[str, float], log_path: Path, env: dict) -> _Round:
    """Run the verifier once.  Each check gets its own limit from when it starts (tasks.json's timeout);
    the time before the first check and after the last is bounded too.  When a limit runs out the
    verifier's group is stopped, and afterwards anything else it started is stopped by its mark."""
    token = secrets.token_hex(8)
    env = dict(env, **{RUN_MARK: token})
    start_offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, verifier], cwd=workdir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    seen_state, since = (None, frozenset()), time.monotonic()
    timed_out, limit = None, 0.0
    try:
        while True:
            try:
                code = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            current, started, reported = _progress(_read_from(log_path, start_offset), list(limits))
            state = (current, frozenset(reported))
            if state != seen_state:  # progress: a check started or reported; its clock starts now
                seen_state, since = state, time.monotonic()
            if current is not None:
                limit = limits.get(current, SETUP_LIMIT)
            else:  # before the first check, or after the last
                limit = TEARDOWN_LIMIT if started else SETUP_LIMIT
            if time.monotonic() - since > limit:
                timed_out = current if current is not None else ""
                _stop_group(proc)
                code = None
                break
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): never leave the verifier behind
            _stop_group(proc)
        stop_leftovers(token)
    return _Round(_read_from(log_path, start_offset), code, timed_out, limit)


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as stream:
        stream.seek(offset)
        return stream.read().decode("utf-8", errors="replace")


def _stop_group(proc: subprocess.Popen) -> None:
    # TERM first so the verifier stops the servers it started, then KILL its group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_verifier(verifier: str, workdir: Path, checks: list[dict], log_path: Path, env: dict,
                 by_id: dict[str, "CheckResult"]) -> None:
    """Run a verifier until each of its checks has a verdict.  A check that overruns its limit is
    TIMEOUT and the verifier is started again for the checks it had not reached, so one hang costs
    one check, not every check after it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    pending = [c["id"] for c in checks]
    limits = {c["id"]: float(c["timeout"]) for c in checks}
    base_only = env.get("LAB_CHECKS")
    while pending:
        round_env = dict(env)
        if len(pending) < len(checks) or base_only:
            round_env["LAB_CHECKS"] = ",".join(pending)
        result = _run_round(verifier, workdir, {k: limits[k] for k in pending}, log_path, round_env)
        reported = parse_tap(result.output)
        # Every line said ok, yet the verifier failed, or hung after its last check: do not trust the passes.
        distrust = result.code != 0 and not result.timed_out and not any(r["status"] == FAIL for r in reported.values())
        for check_id in list(pending):
            seen = reported.get(check_id)
            if seen is None:
                continue
            pending.remove(check_id)
            res = by_id[check_id]
            res.status, res.seconds, res.notes = seen["status"], seen["seconds"], seen["notes"]
            res.message = seen["message"] or (seen["notes"][0] if res.status == FAIL and seen["notes"] else "")
            if distrust:
                res.status = ERROR
                res.message = (f"{verifier} did not exit within {result.limit:g}s after reporting"
                               if result.code is None else f"{verifier} exited with code {result.code} after reporting")
                res.notes = _tail(result.output)
        if not pending:
            break
        if result.timed_out:  # this check hung: TIMEOUT, then start again for the ones after it
            res = by_id[result.timed_out]
            res.status, res.seconds = TIMEOUT, result.limit
            res.message = t(f"{verifier} 在本项的 {result.limit:g} 秒时限内没有给出结果",
                            f"{verifier} ran past this check's {result.limit:g}s limit")
            res.notes = _tail(result.output)
            pending.remove(result.timed_out)
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"\n--- {result.timed_out} timed out; the verifier starts again for {', '.join(pending)} ---\n")
            continue
        for check_id in pending:  # it ended (or hung outside any check) without reporting these
            res = by_id[check_id]
            if result.code is None:
                res.status = TIMEOUT
                res.message = t(f"{verifier} 在检查开始前或结束后超过 {result.limit:g} 秒没有进展",
                                f"{verifier} made no progress for {result.limit:g}s outside any check")
            else:
                res.status = ERROR
                res.message = t(f"{verifier} 以退出码 {result.code} 结束，没有报告本项",
                                f"{verifier} exited with code {result.code} without reporting this check")
            res.notes = _tail(result.output)
        break


def _tail(text: str, lines: int = 15) -> list[str]:
    return text.rstrip().splitlines()[-lines:]


def lab_slot() -> int:
    """LAB_SLOT=0..7 isolates parallel runs (own Redis dbs and schema).  Checks use slot 1 by default:
    slot 0 (db 0/1, shop_lab) is the learner's own, so a worker left running by hand never takes the
    checks' messages."""
    from shared.services import MAX_SLOTS
    raw = os.environ.get("LAB_SLOT", "1")
    if not raw.isdigit() or int(raw) >= MAX_SLOTS:
        raise ValueError(f"LAB_SLOT={raw!r}: use a number from 0 to {MAX_SLOTS - 1}")
    return int(raw)


class SchemaError(Exception):
    """A schema file in the folder being checked is missing or does not run: that folder's problem."""


def prepare_services(lesson: dict, workdir: Path, schema_files: list[str] | None = None,
                     schema_upto: str | None = None) -> list[str]:
    """Lessons 08–16: services up, the kit's .env.tasks in the work dir, a fresh database with the schemas.

    The database is rebuilt from the products sample data plus every lesson's schema_*.sql up to this
    lesson (or up to `schema_upto`: a regression run uses the folder's own lesson), in lesson order, taken
    from the work dir (so a learner's own schema files are the ones used).
    """
    notices: list[str] = []
    services = lesson.get("services") or []
    if not services:
        return notices
    from shared import labctl
    from shared import services as S
    from shared.manifest import load

    slot = lab_slot()
    labctl.up(services)
    secret = labctl.ensure_credentials()
    env_copy = workdir / ".env.tasks"
    env_copy.unlink(missing_ok=True)  # the kit's credentials replace a learner's own file in the scratch copy
    fd = os.open(env_copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(S.slot_env(labctl.task_env_text(secret), slot))
    if "mysql" not in services:
        return notices
    labctl.reset_database(S.slot_database(slot))
    schema_files = schema_files if schema_files is not None else [
        name for item in load()["lessons"] if item["id"] <= (schema_upto or lesson["id"])
        for name in item.get("files", []) if name.startswith("schema_") and name.endswith(".sql")]
    conn = labctl.app_connect(secret, S.slot_database(slot))
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            for name in dict.fromkeys(schema_files):
                path = workdir / name
                if not path.is_file():
                    raise SchemaError(t(f"文件夹里没有 {name}：本课的表由它建立", f"{name} is missing from the folder: "
                                        "this lesson's tables are made by it"))
                for statement in labctl.split_sql(path.read_text(encoding="utf-8", errors="replace")):
                    try:
                        cur.execute(statement)
                    except Exception as exc:
                        # A schema file may end with a look at what it made (SHOW CREATE TABLE …, SELECT
                        # @@…) that this server cannot answer: report it, keep going. DDL errors stop the run.
                        if statement.lstrip().split(None, 1)[0].upper() not in ("SELECT", "SHOW"):
                            first = statement.strip().splitlines()[0][:100]
                            raise SchemaError(t(f"{name} 执行失败：`{first}`：{exc}",
                                                f"{name} failed on `{first}`: {exc}")) from None
                        first = statement.strip().splitlines()[0][:80]
                        notices.append(f"{name}: skipped informational statement `{first}`: {exc}")
    finally:
        conn.close()
    return notices


def start_processes(lesson: dict, workdir: Path, log_dir: Path, env: dict) -> list[Process]:
    """Start the lesson's declared background processes and wait (bounded) for each to be ready."""
    started: list[Process] = []
    try:
        for spec in lesson.get("processes", []):
            argv = [sys.executable if part == "{python}" else part for part in spec["argv"]]
            proc = Process(argv, cwd=workdir, log_path=log_dir / f"{spec['name']}.log", env=env)
            started.append(proc)
            ready = spec.get("ready", {})
            proc.wait_ready(spec.get("ready_timeout", 20), port=ready.get("port"), log_contains=ready.get("log"))
            # Verifiers learn each process's pid, command and log (e.g. to SIGKILL a worker and start it again).
            key = re.sub(r"\W", "_", spec["name"]).upper()
            env[f"LAB_PROC_{key}_PID"] = str(proc.pid)
            env[f"LAB_PROC_{key}_ARGV"] = json.dumps(argv)
            env[f"LAB_PROC_{key}_LOG"] = str(proc.log_path)
    except BaseException:
        stop_processes(started)
        raise
    return started


def stop_processes(procs: list[Process]) -> None:
    for proc in reversed(procs):
        proc.stop(grace=10)


def needs_exclusive(lesson: dict, only: set[str] | None = None) -> bool:
    """Does this run stop or restart a shared server?  A lesson marked `exclusive_services` names the
    checks that do with `"exclusive": true`; when none is marked, every run of it is exclusive."""
    if not lesson.get("exclusive_services"):
        return False
    marked = {c["id"] for c in lesson["checks"] if c.get("exclusive")}
    if not marked:
        return True
    return only is None or bool(marked & only)


def regressions_of(lesson: dict, lessons: list[dict] | None = None) -> dict[str, list[dict]]:
    """Earlier lesson id -> the checks of it that lesson NN re-runs as regressions (tasks.json's
    `regressions`: checks of code an earlier lesson built that NN rewrites or still relies on)."""
    wanted = lesson.get("regressions") or []
    if not wanted:
        return {}
    if lessons is None:
        from shared.manifest import load
        lessons = load()["lessons"]
    found: dict[str, list[dict]] = {}
    for earlier in lessons:
        for check in earlier["checks"]:
            if check["id"] in wanted:
                found.setdefault(earlier["id"], []).append(check)
    return found


def run_lesson(lesson: dict, workdir: Path, log_dir: Path, source: str = "reference",
               only: set[str] | None = None, lessons: list[dict] | None = None) -> LessonResult:
    """Run a lesson's checks, then its regressions: the earlier lessons' checks it names, run by their
    own verifiers against this same folder (with this lesson's whole schema).

    `only` runs just those check ids (the rest are reported SKIP without running): the mutant tests use
    it, because a mutant only has to prove its own checks fail."""
    started = time.monotonic()
    own = [_new_result(lesson["id"], c) for c in lesson["checks"]]
    earlier = regressions_of(lesson, lessons)
    if only is not None:
        unknown = only - {r.id for r in own} - {c["id"] for checks in earlier.values() for c in checks}
        if unknown:
            raise ValueError(f"lesson {lesson['id']} has no check or regression {sorted(unknown)}")
    result = _run_guarded(lesson, workdir, log_dir, own, only, lesson["id"])
    for earlier_id, checks in earlier.items():
        regression = dict(_lesson_by_id(earlier_id, lessons), checks=checks)
        rows = [_new_result(earlier_id, c, regression=True) for c in checks]
        for verifier in verifier_files(regression):  # the earlier lesson's verifiers, beside this folder's files
            shutil.copy2(verifier, workdir / verifier.name)
        done = _run_guarded(regression, workdir, log_dir / f"regression-{earlier_id}", rows, only, lesson["id"])
        result.checks += done.checks
        result.logs += done.logs
    result.source, result.seconds = source, time.monotonic() - started
    return result


def _new_result(lesson_id: str, check: dict, regression: bool = False) -> "CheckResult":
    return CheckResult(lesson=lesson_id, id=check["id"], kind=check.get("kind", "core"), text=check["text"],
                       hint=check["hint"], points=0 if regression else check["points"], regression=regression)


def _lesson_by_id(lesson_id: str, lessons: list[dict] | None) -> dict:
    if lessons is None:
        from shared.manifest import load
        lessons = load()["lessons"]
    return next(l for l in lessons if l["id"] == lesson_id)


def _run_guarded(lesson: dict, workdir: Path, log_dir: Path, results: list, only: set[str] | None,
                 schema_upto: str) -> LessonResult:
    """One lesson's checks in `results`, under the services lock when the lesson has services."""
    started = time.monotonic()
    selected = None if only is None else only & {r.id for r in results}
    if selected is not None and not selected:  # nothing of this lesson asked for: start nothing
        for r in results:
            r.status, r.message = SKIPPED, "not selected"
        return LessonResult(lesson, "", results, 0.0)
    if lesson.get("services"):
        from shared.labctl import in_use
        with in_use(exclusive=needs_exclusive(lesson, selected)):
            return _run_lesson(lesson, workdir, log_dir, "", started, results, selected, schema_upto)
    return _run_lesson(lesson, workdir, log_dir, "", started, results, selected, schema_upto)


def _run_lesson(lesson, workdir, log_dir, source, started, results, only=None, schema_upto=None) -> LessonResult:
    by_id = {r.id: r for r in results}
    verifiers: dict[str, list[dict]] = {}
    for check in lesson["checks"]:
        if only is not None and check["id"] not in only:
            by_id[check["id"]].status, by_id[check["id"]].message = SKIPPED, "not selected"
            continue
        verifiers.setdefault(check["verifier"], []).append(check)
    extra = {"LAB_LOG_DIR": str(log_dir), "LAB_LESSON": lesson["id"]}
    if only is not None:
        extra["LAB_CHECKS"] = ",".join(sorted(only))
    env = verifier_env(extra)
    logs: list[Path] = []
    try:  # a service that cannot start is an environment error: ServiceError propagates
        notices = prepare_services(lesson, workdir, schema_upto=schema_upto)
    except SchemaError as exc:  # the folder's own schema: every check of this run is an error, said once
        for result in results:
            result.status, result.message = ERROR, str(exc)
        return LessonResult(lesson, source, results, time.monotonic() - started, [], [], [str(exc)])
    try:
        procs = start_processes(lesson, workdir, log_dir, env)
    except AssertionError as exc:  # a background process never became ready: every check is an error, with why
        for result in results:
            result.status, result.message = ERROR, f"background process not ready: {exc}"
        return LessonResult(lesson, source, results, time.monotonic() - started, sorted(log_dir.glob("*.log")))
    try:
        for verifier, checks in verifiers.items():
            log_path = log_dir / f"{Path(verifier).stem}.log"
            logs.append(log_path)
            if not (workdir / verifier).is_file():
                for check in checks:
                    by_id[check["id"]].message = f"verifier {verifier} is missing from the work dir"
                continue
            run_verifier(verifier, workdir, checks, log_path, env, by_id)
    finally:
        stop_processes(procs)
    logs += [log_dir / f"{p['name']}.log" for p in lesson.get("processes", [])]
    return LessonResult(lesson, source, results, time.monotonic() - started, logs, notices)
