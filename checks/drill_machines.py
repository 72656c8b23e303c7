"""The grading drill's stand-ins: a private Redis broker, grading workers as separate processes (machines
that can be killed, stopped and replaced), and a class made from the kit's reference files."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from checks.box import TEMPLATES
from checks.workdir import STATE_DIR, reference_files
from shared import manifest
from shared.i18n import t
from shared.manifest import KIT_ROOT
from shared.proc import WaitTimeout, proc_stat, wait_until
from shared.proc import free_port as any_free_port

# The drill's visibility timeout: longer than its slowest grading (lessons 01-03 of one folder: ~12 s
# alone, under 60 s with three workers on two cores), short enough that a dead machine's folder comes
# back within the drill.  A class uses checks.grading_worker's 3600 s.
DRILL_VISIBILITY = 120
KIT_PORTS = {6384, 3307}  # the kit's own services: never ours


class DrillError(Exception):
    pass


def wait_for(what: str, predicate, limit: float, every: float = 0.1):
    """shared.proc.wait_until (poll real state, bounded), failing the way the drill reports failures."""
    try:
        return wait_until(predicate, limit, what, every)
    except WaitTimeout as exc:
        raise DrillError(str(exc)) from None


def free_port() -> int:
    """shared.proc.free_port, never one of the kit's own service ports."""
    while True:
        port = any_free_port()
        if port not in KIT_PORTS:
            return port


def parent_of(pid: int) -> int | None:
    fields = proc_stat(pid)
    return int(fields[3]) if fields else None


def session_members(sid: int) -> list[int]:
    """Processes whose session is `sid` (a session this drill made with start_new_session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            fields = proc_stat(int(entry.name))
            if fields and int(fields[5]) == sid:
                found.append(int(entry.name))
    return found


class Broker:
    """A private redis-server; its password lives in a 0600 config file, never on a command line."""

    def __init__(self, home: Path):
        self.dir = home / "redis"
        self.dir.mkdir(mode=0o700)
        self.port = free_port()
        password = secrets.token_urlsafe(24)
        conf = self.dir / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\nprotected-mode yes\ndir {self.dir}\n"
                        f"requirepass {password}\nsave \"\"\nappendonly yes\nappendfsync everysec\n"
                        f"logfile {self.dir / 'redis.log'}\ndaemonize no\n")
        self.conf = conf
        self.url = f"redis://:{password}@127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redis
        self.proc = subprocess.Popen(["/usr/bin/redis-server", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=1)

        def answers():
            if self.proc.poll() is not None:
                raise DrillError(t("redis-server exited ({returncode}), see {dir}/redis.log", dir=self.dir,
                                   returncode=self.proc.returncode))
            try:
                return client.ping()
            except redis.RedisError:  # not listening yet, or still loading its append-only file
                return False
        wait_for("redis-server answers PING", answers, 30)
        client.close()

    def stop(self) -> None:
        """TERM by PID: Redis writes its append-only file out and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Grader:
    """One grading worker (a stand-in machine): `python -m checks.distributed worker -c 1`."""

    def __init__(self, name: str, broker_url: str, home: Path):
        self.name, self.log = name, home / f"{name}.log"
        env = dict(lab_env(home), LAB_GRADE_BROKER=broker_url, LAB_GRADE_VISIBILITY=str(DRILL_VISIBILITY),
                   PYTHONUNBUFFERED="1")
        with open(self.log, "wb") as log:
            # Its own session: a machine's death is SIGKILL to this group (the worker and its pool child).
            self.proc = subprocess.Popen([sys.executable, "-m", "checks.distributed", "worker", "-c", "1",
                                          "-n", f"{name}@%h", "-l", "INFO"], cwd=KIT_ROOT, env=env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()
        self.replaced = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, limit: float = 60) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()

    def kill_group(self) -> None:
        """SIGKILL what is left of this worker: the processes of the session it was started in (its pool
        children), found by their session id — each one this drill started, directly or through it."""
        for pid in [self.pid] if self.alive() else []:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # alive, so the group id is still ours
        self.proc.wait()
        # The session's id stays reserved while any member lives; a live process with the worker's pid
        # means the id was given out again after all of ours ended: then nothing of ours is left.
        if not Path(f"/proc/{self.pid}").exists():
            for pid in session_members(self.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def lab_env(home: Path) -> dict:
    """The drill's own state folder (work folders, logs), sharing the kit's prepared MariaDB data dir: nothing
    of it outlives the drill, and no instructor's scratch folders are touched."""
    lab = home / "lab"
    if not lab.exists():
        lab.mkdir()
        (STATE_DIR / TEMPLATES).mkdir(parents=True, exist_ok=True)
        (lab / TEMPLATES).symlink_to(STATE_DIR / TEMPLATES)
    return dict(os.environ, LAB_HOME=str(lab))


def make_class(root: Path, count: int) -> list[Path]:
    """`count` folders from the reference after lesson 03; every third one's POST answers 200."""
    files = reference_files(manifest.load()["lessons"], "03")
    folders = []
    for i in range(count):
        name = f"student{i + 1:02d}"
        lab = root / "class" / name / "tasks_lab"
        for rel, src in files.items():
            (lab / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, lab / rel)
        (lab / "NOTES.md").write_text(f"{name}: my tasks lab\n", encoding="utf-8")  # own bytes, own key
        if i % 3 == 2:
            states = lab / "api_states.py"
            text = states.read_text(encoding="utf-8")
            broken = text.replace('@app.post("/exports", status_code=202)', '@app.post("/exports", status_code=200)')
            if broken == text:
                raise DrillError("api_states.py: the POST decorator was not found; update make_class")
            states.write_text(broken, encoding="utf-8")
        (lab / "__pycache__").mkdir(exist_ok=True)  # skipped by packing, as by a local grade
        (lab / "__pycache__" / "junk.pyc").write_bytes(os.urandom(64))
        folders.append(lab)
    return folders
