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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from checks import box as B
from checks import boxfiles
from checks.verdicts import Reader, foreign
from checks.workdir import LAB_DIR, verifier_files
from shared.manifest import KIT_ROOT
from shared import figures
from shared.i18n import t
from shared.proc import Process
from shared.tap import START_MARK

TAP_LINE = re.compile(r"^(not ok|ok)\s+\d+\s+-\s+(\d\d\.\d+)\b(.*?)(?:\s+#\s*(SKIP|TODO)\b\s*(.*))?$", re.I)
OUTPUT_CAP = 500  # characters of output kept per check, as in Exercism's results.json

PASS, FAIL, ERROR, TIMEOUT, SKIPPED = "pass", "fail", "error", "timeout", "skipped"
SUPERSEDED = "superseded"  # a later lesson the folder has reached replaced this check's subject: not counted
NOT_REACHED = "not_reached"  # the folder has not got to this lesson yet (none of its new files): not run
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
    tampered: bool = False    # the verdict could not be trusted: code reached into the checker
    seconds: float = 0.0
    message: str = ""
    notes: list[str] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)  # pictures of the evidence (shared/figures.py)

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
    notices: list[str] = field(default_factory=list)  # e.g. schema lines the server could not answer
    problems: list[str] = field(default_factory=list)  # what is wrong with the learner's folder, said once

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


class Stopped(BaseException):
    """The run was told to stop (TERM or Ctrl-C while grading): its box is gone; unwind, report nothing.
    A BaseException, so no `except Exception` on the way turns it into one folder's error."""


STOP = threading.Event()  # set once by whoever handles TERM/Ctrl-C: every running box stops within 0.1 s

SETUP_LIMIT = 60.0     # seconds a lesson may take before its first check starts (servers, processes, imports)
TEARDOWN_LIMIT = 60.0  # seconds it may take to end after its last check (stopping what it started)
RUN_MARK = "LAB_RUN_ID"  # every process of a run inherits this mark; leftovers are found by it


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


# --- one run of a lesson's verifiers, boxed -------------------------------------------------------

def boxing() -> str:
    """LAB_BOX=auto (default: a box when one can be made), on (a box or an error), off (no box)."""
    from checks import box
    wanted = os.environ.get("LAB_BOX", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "on", "off"):
        raise ValueError(f"LAB_BOX={wanted!r}: use auto, on or off")
    if wanted == "off":
        return "off"
    box.install_bubblewrap()  # as root and missing only, the way the servers are installed
    ok, why = box.availability()
    if not ok and wanted == "on":
        raise box.BoxUnavailable(why)
    return "on" if ok else "off"


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
            "verifiers_dir": str(_verifiers_dir(lesson)),
            "env": {"LAB_LOG_DIR": str(log_dir), "LAB_LESSON": lesson["id"], "LAB_CHECKS": ",".join(pending)}}
    started = _start_inbox(lesson, workdir, log_dir, spec, boxed, subprocess.PIPE, staged)
    proc, key, token, channel_r, cgroups, spec_path = started
    reader = Reader(key, token, B.RECORD_LIMIT, B.CHANNEL_LIMIT)
    records: list[dict] = []
    output = bytearray()
    ended, current, limit = "exit", None, 0.0
    seen_state, since, last_disk_look = None, time.monotonic(), 0.0
    streams = {proc.stdout.fileno(): "out", channel_r: "channel"}
    try:
        import select
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
                _stop_box(proc)
                break
        proc.wait()
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): never leave the box behind
            _stop_box(proc)
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


def _verifiers_dir(lesson: dict) -> Path:
    return (KIT_ROOT / lesson["folder"] / "verifiers").resolve()


def _start_inbox(lesson: dict, workdir: Path, log_dir: Path, spec: dict, boxed: bool, stdout,
                 staged: Path | None = None):
    """Start checks/inbox.py with this spec, in a box (or bare): (process, key, run token, verdict channel's
    reading end, cgroups, spec file).  The key reaches the inbox through a pipe, never a file or argv.
    `staged`: the host's own copy of the folder; the box's `workdir` is made afresh from it first, so no
    box starts in (or lets the host act on) what an earlier box left there."""
    from checks.verdicts import KEY_BYTES, key_pipe
    if STOP.is_set():
        raise Stopped()
    if staged is not None:
        boxfiles.stage(staged, workdir)
    token = secrets.token_hex(8)
    key = secrets.token_bytes(KEY_BYTES)
    spec = dict(spec, nproc=None)
    spec_path = boxfiles.private_dir(LAB_DIR / "run") / f"{token}.spec.json"  # where no box can write
    channel_r, channel_w = os.pipe()
    key_fd = key_pipe(key)
    os.set_inheritable(channel_w, True)
    inbox = [sys.executable, "-I", str(KIT_ROOT / "checks" / "inbox.py")]
    cgroups: list[Path] = []
    verdict_env = {"LAB_VERDICT_KEY_FD": str(key_fd), "LAB_VERDICT_FD": str(channel_w), "LAB_VERDICT_RUN": token}
    if boxed:
        if lesson.get("services"):
            from shared.labctl import ensure_binaries
            ensure_binaries()  # installed outside (as root); the box only runs them
        cgroups = B.make_cgroups()
        if not any(group.parent.name == "pids" for group in cgroups):
            spec["nproc"] = _my_process_count() + B.PIDS_LIMIT
        overlays = {v.name: v for v in verifier_files(lesson)}
        overlays.update({"shared": KIT_ROOT / "shared", "checks": KIT_ROOT / "checks",
                         "__pycache__": _empty_dir()})
        box_env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                   "HOME": "/tmp/home", "LANG": os.environ.get("LANG", "C.UTF-8"), "TMPDIR": "/tmp",
                   "LAB_LANG": os.environ.get("LAB_LANG", ""), "PYTHONPATH": str(KIT_ROOT),
                   "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                   "LAB_SERVICES": "native", "LAB_PRIVATE_SERVICES": "/tmp/lab", "LAB_SLOT": "0",
                   "LAB_BOXED": "1", RUN_MARK: token, **verdict_env}
        # The lesson's verifiers, read-only where a judge (checks/judge.py) imports them from.
        files = {"/box/spec.json": spec_path, "/box/verifiers": _verifiers_dir(lesson)}
        spec["verifiers_dir"] = "/box/verifiers"
        if lesson.get("services") and "mysql" in lesson["services"]:
            files["/box/mariadb"] = B.mariadb_template(LAB_DIR)
            box_env["LAB_MARIADB_TEMPLATE"] = "/box/mariadb"
        argv = B.Box(workdir, log_dir, overlays, files, box_env, cgroups).popen_argv([*inbox, "/box/spec.json"])
        child_env = None
    else:
        argv = [*inbox, str(spec_path)]
        child_env = verifier_env({RUN_MARK: token, **verdict_env})
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=child_env, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(key_fd, channel_w))
    finally:
        os.close(key_fd)
        os.close(channel_w)
    return proc, key, token, channel_r, cgroups, spec_path


def run_script(lesson: dict, workdir: Path, log_dir: Path, argv: list[str], monitor: bool = False,
               staged: Path | None = None) -> int:
    """A kit script (the soak, a benchmark) in a box of its own with the lesson's servers: its output goes
    to the terminal, its exit status is returned.  (The reference only: its verdict is its exit status.)
    `monitor`: the box also feeds `make monitor` its numbers (checks/monitor.py)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = {"lesson": dict(lesson, processes=[]), "schema_upto": lesson["id"], "script": argv, "monitor": monitor,
            "log_dir": str(log_dir), "env": {"LAB_LOG_DIR": str(log_dir), "LAB_LESSON": lesson["id"]}}
    proc, _key, token, channel_r, cgroups, spec_path = _start_inbox(lesson, workdir, log_dir, spec,
                                                                    boxing() == "on", None, staged)
    try:
        while proc.poll() is None:
            if STOP.is_set():
                _stop_box(proc)
                raise Stopped()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        return proc.returncode
    finally:
        if proc.poll() is None:
            _stop_box(proc)
        os.close(channel_r)
        stop_leftovers(token)
        B.remove_cgroups(cgroups)
        spec_path.unlink(missing_ok=True)


def _stop_box(proc: subprocess.Popen) -> None:
    # The box's pid 1 dies with bubblewrap (--die-with-parent) and takes every process in it along;
    # without a box, the group goes and then anything else carrying the run's mark.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _my_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(list((entry / "task").iterdir()))
    return count


def _empty_dir() -> Path:
    empty = LAB_DIR / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    return empty


def run_checks(lesson: dict, workdir: Path, log_dir: Path, checks: list[dict], by_id: dict[str, "CheckResult"],
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
            verifier = next(c["verifier"] for c in checks if c["id"] == check_id)
            code = exits.get(verifier)
            fails = any(results[c]["status"] == FAIL for c in results
                        if next(x["verifier"] for x in checks if x["id"] == c) == verifier)
            if tampered:
                res.status, res.notes, res.tampered = ERROR, _tail(result.output), True
                res.message = t("疑似篡改：检查器自己的函数被替换，或判定通道上出现了未签名的行，"
                                "或判定来自检查器以外的进程（例如 fork 出的副本）",
                                "tampering suspected: the checker's own functions were replaced, unsigned lines "
                                "appeared on the verdict channel, or verdicts came from a process other than the "
                                "checker (a fork of it)")
            elif result.ended == "exit" and code != 0 and not fails:
                # Every line said ok, yet the verifier failed (or its end was never seen): distrust the passes.
                res.status, res.notes = ERROR, _tail(result.output)
                res.message = (f"{verifier} exited with code {code} after reporting" if code is not None else
                               t(f"{verifier} 报告之后没有正常结束", f"{verifier} never ended normally after reporting"))
            elif result.ended != "exit" and stuck is None and code is None and not fails:
                res.status, res.notes = ERROR, _tail(result.output)
                res.message = f"{verifier} did not exit within {result.limit:g}s after reporting"
        if not pending:
            break
        if result.ended in ("timeout", "output", "disk") and stuck is not None:
            res = by_id[stuck]
            if result.ended == "timeout":
                res.status, res.seconds = TIMEOUT, result.limit
                res.message = t(f"在本项的 {result.limit:g} 秒时限内没有给出结果",
                                f"ran past this check's {result.limit:g}s limit")
            elif result.ended == "output":
                res.status = ERROR
                res.message = t(f"输出超过上限（屏幕输出 {B.OUTPUT_LIMIT >> 20} MB，或判定通道上过长的记录）：运行被停止",
                                f"output limit: over {B.OUTPUT_LIMIT >> 20} MB printed, or an over-long record on "
                                "the verdict channel: the run was stopped")
            else:
                res.status = ERROR
                res.message = t(f"写入磁盘超过 {B.DISK_LIMIT >> 20} MB：运行被停止",
                                f"wrote over {B.DISK_LIMIT >> 20} MB to disk: the run was stopped")
            res.notes = _tail(result.output)
            pending.remove(stuck)
            if result.ended == "timeout" and pending and not probed:
                probed = True
                hung = _hanging_imports(lesson, workdir, log_dir, result.limit, staged)
                if hung:  # every check importing it would hang in turn: said once, not waited out again
                    message = t(f"导入 {hung[0]}.py 一直没有结束：模块顶层的代码在导入时就会运行，那里的死循环会卡住每一项检查。"
                                f"把它移到 if __name__ == \"__main__\": 下面。{stuck} 之后的检查没有运行。",
                                f"importing {hung[0]}.py never finishes: code at a module's top level runs at import, "
                                f"and an endless loop there blocks every check. Move it under "
                                f"`if __name__ == \"__main__\":`. The checks after {stuck} were not run.")
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
                res.message = t(f"在检查开始前或结束后超过 {result.limit:g} 秒没有进展",
                                f"made no progress for {result.limit:g}s outside any check")
            elif result.ended in ("output", "disk"):
                res.status = ERROR
                res.message = t("输出或磁盘写入超过上限：运行被停止", "output or disk use over its limit: the run was stopped")
            else:
                verifier = next(c["verifier"] for c in checks if c["id"] == check_id)
                code = exits.get(verifier)
                res.status = ERROR
                res.message = (t(f"{verifier} 以退出码 {code} 结束，没有报告本项",
                                 f"{verifier} exited with code {code} without reporting this check")
                               if code is not None else
                               t(f"{verifier} 没有报告本项就结束了", f"{verifier} ended without reporting this check"))
            res.notes = _tail(result.output)
        break
    return []


def _hanging_imports(lesson: dict, workdir: Path, log_dir: Path, limit: float, staged: Path | None) -> list[str]:
    """The lesson's modules in the folder whose import alone outlasts a check's whole `limit`
    (checks/import_probe.py, in a box of its own).  Its answer is read back as data: capped, no link
    followed, and only names of the lesson's own modules are believed."""
    folder = staged or workdir
    names = [n[:-3] for n in lesson.get("files", []) if n.endswith(".py") and (folder / n).is_file()]
    if not names:
        return []
    out = log_dir / "import-probe.json"
    probe = str(Path(__file__).resolve().parent / "import_probe.py")
    run_script(dict(lesson, services=[]), workdir, log_dir, [probe, str(out), f"{limit:g}", *names], staged=staged)
    try:
        hung = json.loads(boxfiles.read(out, 64 * 1024))["hung"]
        return [name for name in hung if name in names]
    except (OSError, ValueError, KeyError, TypeError):
        return []


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
                        notices.append(t(f"{name}：只用于查看的语句 `{first}` 这个服务器答不了（{exc}），已略过；检查不需要它",
                                         f"{name}: `{first}` only looks at the result, and this server cannot "
                                         f"answer it ({exc}); passed over — the checks do not need it"))
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
               only: set[str] | None = None, lessons: list[dict] | None = None,
               schema_upto: str | None = None) -> LessonResult:
    """Run a lesson's checks, then its regressions: the earlier lessons' checks it names, run by their
    own verifiers against this same folder (with this lesson's whole schema).

    `only` runs just those check ids (the rest are reported SKIP without running): the mutant tests use
    it, because a mutant only has to prove its own checks fail.  `schema_upto`: the folder has moved on to
    that lesson, so its whole schema is applied (its later lessons' tables are there)."""
    started = time.monotonic()
    boxfiles.remove(log_dir)  # each run's logs are its own: an earlier run's lines are never read as this one's
    own = [_new_result(lesson["id"], c) for c in lesson["checks"]]
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
        gone = _superseded(own, lesson, lessons, upto)
        result = _run_guarded(lesson, workdir, log_dir, own, _without(only, own, gone), upto, staged)
        _mark_superseded(own, gone)
        for earlier_id, checks in earlier.items():
            regression = dict(_lesson_by_id(earlier_id, lessons), checks=checks)
            rows = [_new_result(earlier_id, c, regression=True) for c in checks]
            gone = _superseded(rows, regression, lessons, upto)
            for verifier in verifier_files(regression):  # the earlier lesson's verifiers, beside the folder's files
                shutil.copy2(verifier, staged / verifier.name)
            # Beside this lesson's logs, not inside them: a folder a box wrote never holds the host's next one.
            regression_logs = log_dir.with_name(f"{log_dir.name}-regression-{earlier_id}")
            boxfiles.remove(regression_logs)
            done = _run_guarded(regression, workdir, regression_logs, rows, _without(only, rows, gone), upto, staged)
            _mark_superseded(rows, gone)
            result.checks += done.checks
            result.logs += done.logs
    finally:
        if not workdir.exists():  # nothing ran (or it stopped early): the folder goes back where it was
            staged.rename(workdir)
        else:
            boxfiles.remove(staged)
    result.source, result.seconds = source, time.monotonic() - started
    return result


def _superseded(results: list["CheckResult"], lesson: dict, lessons: list[dict] | None, upto: str) -> dict[str, str]:
    """Check id -> the lesson that replaced its subject, for the checks a folder at lesson `upto` has moved
    past (tasks.json's superseded_by)."""
    by_id = {c["id"]: c for c in lesson["checks"]}
    return {r.id: by_id[r.id]["superseded_by"] for r in results
            if by_id.get(r.id, {}).get("superseded_by") and by_id[r.id]["superseded_by"] <= upto}


def _without(only: set[str] | None, results: list["CheckResult"], gone: dict[str, str]) -> set[str] | None:
    """The checks to run: `only` (or all of these) minus the superseded ones."""
    if not gone:
        return only
    wanted = only if only is not None else {r.id for r in results}
    return wanted - set(gone)


def _mark_superseded(results: list["CheckResult"], gone: dict[str, str]) -> None:
    for r in results:
        if r.id in gone:
            r.status = SUPERSEDED
            r.message = t(f"第 {gone[r.id]} 课替换了本项检查的内容，你的文件夹已经到了那一课：不计分",
                          f"lesson {gone[r.id]} replaced what this checks, and your folder has reached it: "
                          "not counted")


def every_check(lesson: dict, status: str, message: str, source: str = "", tampered: bool = False) -> LessonResult:
    """A lesson whose every check has one status and message, with nothing run: planned, not reached, or
    an error said once for the whole folder.  The report keeps the lesson's real maximum."""
    checks = [_new_result(lesson["id"], c) for c in lesson["checks"]]
    for c in checks:
        c.status, c.message, c.tampered = status, message, tampered
    return LessonResult(lesson, source, checks, 0.0)


def _new_result(lesson_id: str, check: dict, regression: bool = False) -> "CheckResult":
    return CheckResult(lesson=lesson_id, id=check["id"], kind=check.get("kind", "core"), text=check["text"],
                       hint=check["hint"], points=0 if regression else check["points"], regression=regression)


def _lesson_by_id(lesson_id: str, lessons: list[dict] | None) -> dict:
    if lessons is None:
        from shared.manifest import load
        lessons = load()["lessons"]
    return next(l for l in lessons if l["id"] == lesson_id)


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
        from shared import labctl
        with labctl.in_use(exclusive=needs_exclusive(lesson, selected)):
            labctl.up(lesson["services"])  # ServiceError (a service that cannot start) propagates
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
    logs = [log_dir / "box.log", *(log_dir / f"{Path(v).stem}.log" for v in dict.fromkeys(c["verifier"] for c in checks))]
    logs += [log_dir / f"{p['name']}.log" for p in lesson.get("processes", [])]
    return LessonResult(lesson, source, results, time.monotonic() - started, logs, notices, problems)
