"""`python -m checks doctor`: is this machine ready for the kit?  Each problem comes with its fix."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from shared.i18n import t
from shared.manifest import KIT_ROOT

OK, WARN, BAD = "ok", "warn", "bad"
SERVICE_PORTS = {"redis": 6384, "mysql": 3307}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (KIT_ROOT / "requirements.txt").read_text().splitlines() + \
            (KIT_ROOT / "requirements-dev.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;#]+)", line.strip())
        if match:
            pins[match.group(1)] = match.group(2)
    return pins


def check_platform():
    """The kit runs learner code, its judges and its servers the Linux way (/proc, prctl, bubblewrap,
    waitid); elsewhere it says so before anything starts."""
    if sys.platform == "linux":
        return OK, "Linux", None
    return BAD, t("this is {platform}: Task Lab runs its checks on Linux (WSL2 on Windows)", platform=sys.platform), \
        t("on macOS, run the kit inside a Linux VM or container (Docker Desktop, OrbStack, UTM, …)")


def check_python(version_info=sys.version_info):
    version = ".".join(map(str, version_info[:3]))
    if version_info < (3, 11):
        return BAD, f"Python {version} < 3.11", t("install Python 3.11+, then run: make lesson-01")
    if version_info < (3, 11, 4):
        # Lesson 06 has learners submit a local function to a process pool; on these versions their
        # script can then hang in shutdown() (the checker works around it, their own terminal does not).
        return WARN, t("Python {version}: a process pool's shutdown can hang after a failed map() (CPython "
                       "gh-94440, fixed in 3.11.4), as lesson 06 shows", version=version), \
            t("install Python 3.11.4+ or 3.12+, then: rm -rf .venv && make venv PYTHON=python3.12")
    return OK, f"Python {version}", None


def check_venv():
    venv = KIT_ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        return BAD, t("no .venv yet"), "make venv"
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        return WARN, t("not running from .venv"), ".venv/bin/python -m checks doctor"
    return OK, ".venv", None


def check_packages():
    wrong = []
    for name, pinned in _pins().items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != pinned:
            wrong.append(f"{name} {have} (≠ {pinned})" if have else
                         t("{name} missing (≠ {pinned})", name=name, pinned=pinned))
    if wrong:
        return BAD, "; ".join(wrong), "make venv"
    return OK, t("all {n_pins} pinned packages installed", n_pins=len(_pins())), None


def check_wsl(proc_version: str | None = None, kit_root: Path = KIT_ROOT):
    """proc_version: the text of /proc/version (read here when not given)."""
    if proc_version is None:
        try:
            with open("/proc/version", encoding="utf-8") as f:
                proc_version = f.read()
        except OSError:
            proc_version = ""
    if "microsoft" not in proc_version.lower():
        return OK, t("not WSL"), None
    if re.match(r"^/mnt/[a-z]/", str(kit_root)):
        return WARN, t("the kit lives on a Windows drive ({kit_root}): slow file watching and processes",
                       kit_root=kit_root), \
            t("clone it again inside Linux: cd ~ && git clone <kit-url>")
    return OK, t("WSL, kit on the Linux file system"), None


def check_servers():
    docker = shutil.which("docker")
    if docker:
        try:
            if subprocess.run([docker, "info"], capture_output=True, timeout=5).returncode == 0:
                return OK, t("Docker engine available"), None
        except (OSError, subprocess.TimeoutExpired):
            pass
    search = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/usr/local/sbin"
    redis = shutil.which("redis-server", path=search)
    mysql = shutil.which("mariadbd", path=search) or shutil.which("mysqld", path=search)
    if redis and mysql:
        return OK, t("native redis-server and MariaDB/MySQL found"), None
    missing = [name for name, found in (("redis-server", redis), ("mariadb-server", mysql)) if not found]
    return WARN, t("lessons 08–16 need: {missing} missing and no Docker engine", missing=', '.join(missing)), \
        f"sudo apt-get install -y {' '.join(missing)}"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _ours(name: str) -> bool:
    from shared.services_native import MYSQL, REDIS
    service = {"redis": REDIS, "mysql": MYSQL}.get(name)
    return service is not None and service.pid() is not None


def _next_lesson_needs_services() -> bool:
    """Does the lesson the learner is on (their remembered folder's, else the reference's next) need
    Redis and MySQL?  Unknown: assume it does."""
    from checks import progress
    from checks.selection import next_lesson
    from shared import manifest
    data = manifest.load()
    folder = progress.learner_folder()
    lesson_id = next_lesson(data, folder)[0] if folder else None
    if lesson_id is None:
        passed = sorted(lid for lid, e in progress.load().items() if e["status"] == "pass")
        lesson_id = f"{int(passed[-1]) + 1:02d}" if passed else "01"
    lesson = manifest.lesson(lesson_id, data)
    return lesson is None or bool(lesson.get("services"))


def check_ports(ports: dict[str, int] = SERVICE_PORTS, lesson_needs_services: bool | None = None):
    """Are the services' ports free or held by the kit's own servers?  lesson_needs_services: does the
    learner's current lesson need Redis and MySQL (worked out here when not given)."""
    from shared import servicectl
    with servicectl.starting():  # never look half-way through a start
        taken = [f"{port} ({name})" for name, port in ports.items() if not _port_free(port) and not _ours(name)]
    if taken:
        # Only lessons 08–16 need these ports: for a learner still on 01–07 it is a warning, not a blocker.
        if lesson_needs_services is None:
            lesson_needs_services = _next_lesson_needs_services()
        level = BAD if lesson_needs_services else WARN
        return level, t("ports held by another program: {taken} (lessons 08–16 need them)", taken=', '.join(taken)), \
            t("find the holder: ss -ltnp | grep -E ':(6384|3307) ', stop it, retry")
    return OK, t("ports 6384/3307 free or ours"), None


def check_disk():
    free_gib = shutil.disk_usage(KIT_ROOT).free / 2**30
    if free_gib < 1:
        return BAD, t("only {free_gib:.1f} GiB disk free", free_gib=free_gib), \
            t("free some space, e.g.: make clean")
    return OK, t("{free_gib:.0f} GiB disk free", free_gib=free_gib), None


def check_box():
    """Can learner code run boxed here (bubblewrap, namespaces)?  Without boxes `check` warns and `grade`
    refuses unless --unsafe."""
    from checks import box
    ok, why = box.availability()
    if ok:
        limits = t("processes and memory capped by a cgroup") if os.geteuid() == 0 else \
            t("processes and memory capped by rlimits")
        return OK, t("boxes available (bubblewrap, {limits})", limits=limits), None
    return WARN, t("no boxes here: learner code runs unboxed; grade needs --unsafe"), why


CHECKS = [check_platform, check_python, check_venv, check_packages, check_wsl, check_box, check_servers, check_ports,
          check_disk]


def run() -> int:
    worst = OK
    for check in CHECKS:
        level, what, fix = check()
        mark = {OK: "✓", WARN: "!", BAD: "✗"}[level]
        print(f"{mark} {what}")
        if fix:
            print(f"    → {fix}")
        if level == BAD or (level == WARN and worst == OK):
            worst = level if worst != BAD else BAD
    return 2 if worst == BAD else 0
