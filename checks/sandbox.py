"""Starting checks/inbox.py in a box (checks/box.py) or bare, and ending it: LAB_BOX, the mark every process
of a run carries and the sweep of what is left of it, STOP for TERM/Ctrl-C, and a kit script run boxed."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from checks import box as B
from checks import boxfiles
from checks.verdicts import KEY_BYTES, key_pipe
from checks.workdir import STATE_DIR, verifier_files
from shared.manifest import KIT_ROOT


class Stopped(BaseException):
    """The run was told to stop (TERM or Ctrl-C while grading): its box is gone; unwind, report nothing.
    A BaseException, so no `except Exception` on the way turns it into one folder's error."""


STOP = threading.Event()  # set once by whoever handles TERM/Ctrl-C: every running box stops within 0.1 s

RUN_MARK = "TASKLAB_RUN_ID"  # every process of a run inherits this mark; leftovers are found by it


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


def boxing() -> str:
    """LAB_BOX=auto (default: a box when one can be made), on (a box or an error), off (no box)."""
    wanted = os.environ.get("LAB_BOX", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "on", "off"):
        raise ValueError(f"LAB_BOX={wanted!r}: use auto, on or off")
    if wanted == "off":
        return "off"
    B.install_bubblewrap()  # as root and missing only, the way the servers are installed
    ok, why = B.availability()
    if not ok and wanted == "on":
        raise B.BoxUnavailable(why)
    return "on" if ok else "off"


def verifiers_dir(lesson: dict) -> Path:
    return (KIT_ROOT / lesson["folder"] / "verifiers").resolve()


def start_inbox(lesson: dict, workdir: Path, log_dir: Path, spec: dict, boxed: bool, stdout,
                staged: Path | None = None):
    """Start checks/inbox.py with this spec, in a box (or bare): (process, key, run token, verdict channel's
    reading end, cgroups, spec file).  The key reaches the inbox through a pipe, never a file or argv.
    `staged`: the host's own copy of the folder; the box's `workdir` is made afresh from it first, so no
    box starts in (or lets the host act on) what an earlier box left there."""
    if STOP.is_set():
        raise Stopped()
    if staged is not None:
        boxfiles.stage(staged, workdir)
    token = secrets.token_hex(8)
    key = secrets.token_bytes(KEY_BYTES)
    spec = dict(spec, nproc=None)
    spec_path = boxfiles.private_dir(STATE_DIR / "run") / f"{token}.spec.json"  # where no box can write
    channel_r, channel_w = os.pipe()
    key_fd = key_pipe(key)
    os.set_inheritable(channel_w, True)
    inbox = [sys.executable, "-I", str(KIT_ROOT / "checks" / "inbox.py")]
    cgroups: list[Path] = []
    verdict_env = {"TASKLAB_VERDICT_KEY_FD": str(key_fd), "TASKLAB_VERDICT_FD": str(channel_w),
                   "TASKLAB_VERDICT_RUN": token}
    if boxed:
        if lesson.get("services"):
            from shared.services_native import ensure_binaries
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
                   "LAB_SERVICES": "native", "TASKLAB_PRIVATE_SERVICES": "/tmp/lab", "LAB_SLOT": "0",
                   "TASKLAB_BOXED": "1", RUN_MARK: token, **verdict_env}
        if os.environ.get("TASKLAB_FORKSERVER"):  # a maintainer comparing warm and cold starts
            box_env["TASKLAB_FORKSERVER"] = os.environ["TASKLAB_FORKSERVER"]
        # The lesson's verifiers, read-only where a judge (checks/judge.py) imports them from.
        files = {"/box/spec.json": spec_path, "/box/verifiers": verifiers_dir(lesson)}
        spec["verifiers_dir"] = "/box/verifiers"
        if lesson.get("services") and "mysql" in lesson["services"]:
            files["/box/mariadb"] = B.mariadb_template(STATE_DIR)
            box_env["TASKLAB_MARIADB_TEMPLATE"] = "/box/mariadb"
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


SCRIPT_OVERRAN = -1  # run_script's status when its `limit` ran out and the box was stopped


def run_script(lesson: dict, workdir: Path, log_dir: Path, argv: list[str], monitor: bool = False,
               staged: Path | None = None, limit: float | None = None) -> int:
    """A kit script (the soak, a benchmark) in a box of its own with the lesson's servers: its output goes
    to the terminal, its exit status is returned.  (The reference only: its verdict is its exit status.)
    `monitor`: the box also feeds `make monitor` its numbers (checks/monitor.py).  `limit`: seconds the box
    may run, for a script that meets learner code (learner code can stop it: SIGSTOP, ptrace); past it the
    box is stopped and SCRIPT_OVERRAN returned."""
    log_dir.mkdir(parents=True, exist_ok=True)
    spec = {"lesson": dict(lesson, processes=[]), "schema_upto": lesson["id"], "script": argv, "monitor": monitor,
            "log_dir": str(log_dir), "env": {"TASKLAB_LOG_DIR": str(log_dir), "TASKLAB_LESSON": lesson["id"]}}
    proc, _key, token, channel_r, cgroups, spec_path = start_inbox(lesson, workdir, log_dir, spec,
                                                                    boxing() == "on", None, staged)
    deadline = None if limit is None else time.monotonic() + limit
    try:
        while proc.poll() is None:
            if STOP.is_set():
                stop_box(proc)
                raise Stopped()
            if deadline is not None and time.monotonic() > deadline:
                stop_box(proc)
                return SCRIPT_OVERRAN
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        return proc.returncode
    finally:
        if proc.poll() is None:
            stop_box(proc)
        os.close(channel_r)
        stop_leftovers(token)
        B.remove_cgroups(cgroups)
        spec_path.unlink(missing_ok=True)


def stop_box(proc: subprocess.Popen) -> None:
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
    empty = STATE_DIR / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    return empty
