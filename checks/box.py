"""The box every run of learner code happens in (bubblewrap), seen from outside.

A box has its own pid, network (loopback only), ipc and uts namespaces and a non-root uid.  It sees:
the system's programs read-only, the kit's code and manifest read-only (not its .state/ or .env.tasks), the scratch copy
of the folder being checked and the run's log folder writable, and a private /tmp of bounded size.  It
never sees $HOME, the kit's servers or their credentials, other learners' folders or other boxes.

Inside it, checks/inbox.py starts the box's own Redis and MariaDB on the curriculum's ports (nothing
collides in a network namespace of its own), then the lesson's processes and verifiers.

Limits: processes and memory through a cgroup when the kit runs as root (cgroup v1 here), else
RLIMIT_NPROC; open files, file size and CPU time through rlimits set by inbox.py before any learner code
runs; the output is capped by the runner; the wall clock kills the whole box (its pid 1 takes every
process in it along).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from shared.i18n import t
from shared.manifest import KIT_ROOT

BOX_UID = 65534                    # "nobody" inside the box
TMP_SIZE = 768 * 1024 * 1024       # the box's /tmp (the private MariaDB's data lives there)
MEMORY_LIMIT = 3 * 1024 ** 3       # like Exercism's runners
PIDS_LIMIT = 1024                  # processes and threads (a Celery pool and MariaDB's threads fit easily)
CGROUP_SETTINGS = (("pids", {"pids.max": PIDS_LIMIT}), ("memory", {"memory.limit_in_bytes": MEMORY_LIMIT}),
                   ("cpu", {"cpu.shares": 1024}))  # 1024: the default weight; every box weighs the same
DISK_LIMIT = 512 * 1024 * 1024     # what the box may write into its scratch folder and logs, in total
OUTPUT_LIMIT = 1024 * 1024         # bytes of output the box may print (Exercism stops at 1 MB too)
RECORD_LIMIT = 1024 * 1024         # one record on the verdict channel (a check's result with its figures)
CHANNEL_LIMIT = 16 * 1024 * 1024   # the verdict channel in all (a whole lesson's records, figures included)
ETC_FILES = ("passwd", "group", "hosts", "nsswitch.conf", "localtime", "ld.so.cache", "ld.so.conf",
             "ld.so.conf.d", "ssl", "ca-certificates", "alternatives", "mime.types", "host.conf", "gai.conf")
TEMPLATES = "templates"            # under STATE_DIR: the MariaDB data dir every box copies
CGROUP_ROOT = Path("/sys/fs/cgroup")
KIT_PARTS = ("checks", "shared", "lessons", "tasks.json")  # what of the kit a box sees (read-only)


class BoxUnavailable(Exception):
    """No box can be made here; the message says why and what to do."""


def _bwrap() -> str | None:
    return shutil.which("bwrap") or (os.path.exists("/usr/bin/bwrap") and "/usr/bin/bwrap") or None


_BOXES_MADE = False  # a box was made once in this process: boxes can be made here


def availability() -> tuple[bool, str]:
    """(can boxes run here, why not).  Tried for real: bubblewrap with every namespace, loopback up.
    Only a success is remembered.  A failure is tried again (here, and at the next call): one probe that
    failed under a passing strain must not leave a whole process (a grader, a test worker) judging
    unboxed from then on -- with LAB_BOX=auto that would run strangers' code bare."""
    global _BOXES_MADE
    if _BOXES_MADE:
        return True, ""
    if sys.platform != "linux":
        return False, t("boxes (bubblewrap) need Linux or WSL2")
    bwrap = _bwrap()
    if bwrap is None:
        how = "apt-get install -y bubblewrap" if os.geteuid() == 0 else "sudo apt-get install -y bubblewrap"
        return False, t("bubblewrap is not installed: {how}", how=how)
    for attempt in range(3):
        probe = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                                "--dev", "/dev", "--uid", str(BOX_UID), "true"], capture_output=True, text=True)
        if probe.returncode == 0:
            _BOXES_MADE = True
            return True, ""
        time.sleep(0.2 * (attempt + 1))
    reason = probe.stderr.strip().splitlines()[-1:] or ["?"]
    return False, t("bubblewrap cannot create namespaces ({reason}). On Ubuntu 24.04+: sudo sysctl -w "
                    "kernel.apparmor_restrict_unprivileged_userns=0; in a container: allow user namespaces",
                    reason=reason[0])


def install_bubblewrap() -> None:
    """Install bubblewrap the way the kit installs its servers: only as root, only when missing."""
    if _bwrap() is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "bubblewrap"], capture_output=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def mariadb_template(lab_dir: Path) -> Path:
    """A MariaDB data dir made once by mariadb-install-db (root without a password, through the socket
    only); each box copies it and sets its own passwords.  Made again when the server's version changes."""
    from shared.services import ServiceError
    from shared.services_native import TEMPLATE_LOG_FILE_SIZE, ensure_binaries, find_binary, install_db
    ensure_binaries()
    server = find_binary("mariadbd")
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.split()
    tag = "-".join(version[2:3]) or "unknown"
    target = lab_dir / TEMPLATES / f"mariadb-{tag}-{TEMPLATE_LOG_FILE_SIZE}"
    if (target / "mysql").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One maker at a time (parallel test workers on a fresh clone all want it at once); the others wait
    # and find it made.
    with open(target.parent / f"{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "mysql").is_dir():
            return target
        making = target.with_name(target.name + f".{os.getpid()}.tmp")
        shutil.rmtree(making, ignore_errors=True)
        try:
            install_db(making, f"--innodb-log-file-size={TEMPLATE_LOG_FILE_SIZE}")
        except ServiceError as exc:
            raise BoxUnavailable(str(exc)) from None
        for path in [making, *making.rglob("*")]:  # readable by the box's uid, which copies it
            path.chmod(0o755 if path.is_dir() else 0o644)
        making.rename(target)
    return target


@dataclass
class Box:
    """One box: what it may write, what it reads, and the limits it runs under."""
    workdir: Path
    log_dir: Path
    ro_over_work: dict[str, Path] = field(default_factory=dict)  # name in workdir -> kit file laid over it
    files: dict[str, Path] = field(default_factory=dict)          # path inside -> file outside (read-only)
    env: dict[str, str] = field(default_factory=dict)
    cgroups: list[Path] = field(default_factory=list)

    def argv(self, command: list[str]) -> list[str]:
        prefix = Path(sys.base_prefix).resolve()
        venv = Path(sys.prefix).resolve()
        args = [_bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--hostname", "box",
                "--uid", str(BOX_UID), "--gid", str(BOX_UID),
                "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/sbin", "/sbin"]
        if Path("/lib64").exists():
            args += ["--symlink", "usr/lib64", "/lib64"]
        for name in ETC_FILES:
            if Path("/etc", name).exists():
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
        for outside in dict.fromkeys([prefix, venv]):  # the interpreter and its packages, when outside /usr
            if not str(outside).startswith("/usr/"):
                args += ["--ro-bind", str(outside), str(outside)]
        # Only the kit's code and manifest: never its .state/ (servers, root password, other runs), its
        # .env.tasks, its git history or anything added beside them later.
        kit = KIT_ROOT.resolve()
        for part in KIT_PARTS:
            args += ["--ro-bind", str(kit / part), str(kit / part)]
        for writable in (self.workdir, self.log_dir):
            args += ["--bind", str(writable), str(writable)]
        # The kit's code in the scratch copy is the kit's own, read-only: a learner's shared/, checks/ or
        # verifier file never shadows it, and a bytecode cache planted in the copy is never read.
        for name, source in self.ro_over_work.items():
            target = self.workdir / name
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif not target.exists():
                target.touch()
            args += ["--ro-bind", str(source), str(target)]
        for inside, outside in self.files.items():
            args += ["--ro-bind", str(outside), inside]
        args += ["--clearenv"]
        for key, value in self.env.items():
            args += ["--setenv", key, value]
        args += ["--chdir", str(self.workdir), "--", *command]
        return args

    def popen_argv(self, command: list[str]) -> list[str]:
        """The command that starts the box inside its cgroups (as root), so every process in it counts."""
        argv = self.argv(command)
        if not self.cgroups:
            return argv
        joins = " && ".join(f"echo $$ > {c / 'cgroup.procs'}" for c in self.cgroups)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "box", *argv]


def make_cgroups() -> list[Path]:
    """As root: a pids, a memory and a cpu cgroup (v1) for one box, with its limits.  Elsewhere: none (the
    box falls back to RLIMIT_NPROC, set inside).  The cpu group caps nothing: it makes the scheduler share
    the CPU between boxes, not between processes, so a fork bomb's thousand busy processes get one box's
    share while the class's other boxes keep theirs."""
    if os.geteuid() != 0:
        return []
    _sweep_stale_cgroups()
    made = []
    name = f"tasklab-{int(time.time())}-{secrets.token_hex(4)}"
    for controller, settings in CGROUP_SETTINGS:
        base = CGROUP_ROOT / controller
        if not (base / "cgroup.procs").exists():
            continue
        group = base / name
        try:
            group.mkdir()
            for key, value in settings.items():
                (group / key).write_text(str(value))
            made.append(group)
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
    return made


STALE_CGROUP = 3600  # seconds: an empty box cgroup this old belongs to a runner that was killed


def _sweep_stale_cgroups() -> None:
    """Remove empty box cgroups left by runners that were killed before their clean-up (the name carries the
    time it was made; a young one may belong to a box that is just starting)."""
    for controller, _settings in CGROUP_SETTINGS:
        for group in (CGROUP_ROOT / controller).glob("tasklab-*"):
            parts = group.name.split("-")
            if len(parts) != 3 or not parts[1].isdigit():
                continue  # not named by this kit version: leave it to whoever made it
            if time.time() - int(parts[1]) > STALE_CGROUP:
                with contextlib.suppress(OSError):
                    group.rmdir()  # refused while a process is still in it


def remove_cgroups(groups: list[Path]) -> None:
    for group in groups:
        for _ in range(50):  # the kernel takes a moment to let go of the last exited process
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def usage_bytes(*folders: Path) -> int:
    """Bytes in these folders (the box's writable ones); stops counting early past the limit."""
    total = 0
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
            if total > DISK_LIMIT:
                return total
    return total
