"""Explicit handshakes between a checker and the helper processes it starts: files in a folder both see.

A helper says it is ready (`ready`), then waits for the checker's word to go (`wait_go`), does one round
and writes its result (`write_result`).  The checker waits until every helper is ready (`wait_ready`),
releases them all at once (`go`), and waits for each result (`wait_result`).  No sleep stands in for
"the other side is ready": each side polls a file the other side writes, and every wait is bounded.

Files are written whole (a temporary name, then os.replace), so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from shared.proc import wait_until

HELPER_LIFETIME = 60.0  # no helper outlives this, whatever happens to the checker


def write_json(path: str | Path, value) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(value, handle, default=repr)
    os.replace(tmp, path)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------- helper side

def ready(folder: str | Path, name: str) -> None:
    write_json(Path(folder) / f"ready-{name}", {"pid": os.getpid()})


def wait_go(folder: str | Path, name: str, round_no: int = 1, lifetime: float = HELPER_LIFETIME):
    """The checker's plan for this round, or None when told to stop (or the lifetime ran out)."""
    folder = Path(folder)
    give_up = time.monotonic() + lifetime
    go = folder / f"go-{name}-{round_no}"
    while time.monotonic() < give_up and not (folder / "stop").exists():
        plan = _read_json(go)
        if plan is not None:
            return plan
        time.sleep(0.002)
    return None


def write_result(folder: str | Path, name: str, value, round_no: int = 1) -> None:
    write_json(Path(folder) / f"res-{name}-{round_no}", value)


def error_of(exc: BaseException, limit: int = 300) -> dict:
    """What a helper's call raised, as its result: {"error": "Type: message"}, cut to `limit`; the checker decides."""
    return {"error": f"{type(exc).__name__}: {exc}"[:limit]}


def serve(folder: str | Path, name: str, act, rounds: int | None = 1, lifetime: float = HELPER_LIFETIME) -> None:
    """A helper's whole side: say ready, then per round wait for the go and write act(plan) as the result —
    `rounds` times (None: until told to stop), never past `lifetime` in all."""
    ready(folder, name)
    give_up = time.monotonic() + lifetime
    round_no = 1
    while rounds is None or round_no <= rounds:
        plan = wait_go(folder, name, round_no, lifetime=max(0.0, give_up - time.monotonic()))
        if plan is None:
            return
        write_result(folder, name, act(plan), round_no)
        round_no += 1


# ---------------------------------------------------------------- checker side

def wait_ready(folder: str | Path, names: list[str], timeout: float = 30.0) -> None:
    folder = Path(folder)
    wait_until(lambda: all((folder / f"ready-{n}").exists() for n in names), timeout,
               f"helpers {names} to say they are ready", interval=0.01)


def go(folder: str | Path, names: list[str], plan=None, round_no: int = 1) -> None:
    """Release every helper at once (as near as the OS allows: one small file each)."""
    for name in names:
        write_json(Path(folder) / f"go-{name}-{round_no}", {} if plan is None else plan)


def wait_result(folder: str | Path, name: str, timeout: float, round_no: int = 1):
    path = Path(folder) / f"res-{name}-{round_no}"
    found = wait_until(lambda: path.exists() and (_read_json(path),), timeout,
                       f"helper {name}'s result for round {round_no}", interval=0.01)
    return found[0]  # wrapped: a result may itself be falsy (an empty list)


def stop(folder: str | Path) -> None:
    (Path(folder) / "stop").touch()


# ---------------------------------------------------------------- holding a helper inside its locks

# A statement that takes row locks: a locking read, or a write.
LOCKING_READ = re.compile(r"\bFOR\s+(?:UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b", re.I)
WRITE = re.compile(r"\s*(?:(?:--[^\n]*\n|#[^\n]*\n|/\*.*?\*/)\s*)*(?:UPDATE|DELETE|INSERT|REPLACE)\b", re.I | re.S)


def takes_locks(statement: str) -> bool:
    return bool(LOCKING_READ.search(statement) or WRITE.match(statement))


def hold_after_first_lock(folder: str | Path, name: str, armed=lambda: True) -> None:
    """In a helper process: wrap pymysql's Cursor.execute so that, once armed(), the first statement that
    takes row locks is followed by `held-NAME` in the folder and a wait for round 2's go — the helper is
    stopped while holding its locks, for as long as the checker needs to look (a handshake, not a sleep)."""
    import pymysql.cursors
    real = pymysql.cursors.Cursor.execute
    held = []

    def execute(self, query, args=None):
        result = real(self, query, args)
        if not held and armed():
            sent = self._executed  # the statement as sent to the server
            text = sent.decode(errors="replace") if isinstance(sent, bytes) else str(sent)
            if takes_locks(text):
                held.append(text)
                write_json(Path(folder) / f"held-{name}", {"statement": text})
                wait_go(folder, name, 2)
        return result

    pymysql.cursors.Cursor.execute = execute


# ---------------------------------------------------------------- a group of helper processes

class HelperGroup:
    """Helper processes of a verifier (each runs the learner's code when the checker says go), started
    together in one handshake folder: `argv` + [folder, name] + `args` per helper, in the work dir (in `env`,
    else this environment).  Either one helper at a time (go, release: a checker holds one helper inside its
    locks and looks at what the others do meanwhile) or all of them, round after round (go_round).  A helper
    that dies at start fails the check with `failed` (a lesson's own words) or "{what} process NAME failed to
    start", and its log tail.  `folder` given as a str: a new folder LOG_DIR/<folder>-<8 hex digits>."""

    def __init__(self, argv: list[str], names: list[str], folder: Path | str, what: str, args: tuple = (),
                 env: dict | None = None, failed: str | None = None):
        import sys
        from uuid import uuid4

        from shared.logs import LOG_DIR
        from shared.settings import WORK, redact
        from shared.i18n import t
        from shared.proc import Process
        if isinstance(folder, str):
            folder = LOG_DIR / f"{folder}-{uuid4().hex[:8]}"
        self.folder, self.what = folder, what
        self.names, self.round = names, 0
        self.folder.mkdir(parents=True)
        self.procs = {name: Process([sys.executable, *argv, str(self.folder), name, *args], cwd=WORK,
                                    log_path=self.folder / f"{name}.log", env=env) for name in names}
        try:
            wait_until(lambda: all((self.folder / f"ready-{n}").exists() for n in names) or self.dead(), 30,
                       f"the {what} processes to import the learner's modules", interval=0.02)
            dead = self.dead()
            assert not dead, (failed or t("{what} process {dead} failed to start:\n", what=what, dead=dead[0])) + \
                redact(self.procs[dead[0]].log_tail(6))
        except BaseException:
            self.stop()
            raise

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if not p.alive() and not self.finished(n)]

    def go(self, name: str, plan: dict) -> None:
        go(self.folder, [name], plan)

    def release(self, name: str) -> None:
        """Let a held helper go on (its round 2)."""
        go(self.folder, [name], round_no=2)

    def held(self, name: str) -> dict | None:
        """The statement the helper stopped after (see hold_after_first_lock), once it has."""
        return _read_json(self.folder / f"held-{name}")

    def wait_held(self, name: str) -> dict | None:
        """The statement the helper stopped after; None if it finished without taking a lock."""
        wait_until(lambda: self.held(name) or self.finished(name) or self.dead(), 30,
                   f"{self.what} {name} to take its first lock", interval=0.01)
        return self.held(name)

    def finished(self, name: str) -> bool:
        return (self.folder / f"res-{name}-1").exists()

    def result(self, name: str, seconds: float):
        """The helper's result; None if it has not finished within `seconds`."""
        from shared.settings import redact
        from shared.i18n import t
        from shared.proc import WaitTimeout
        try:
            wait_until(lambda: self.finished(name) or not self.procs[name].alive(), seconds, f"{self.what} {name}",
                       interval=0.005)
        except WaitTimeout:
            return None
        assert self.finished(name), t("{what} process {name} ended without a result:\n", what=self.what, name=name) + \
            redact(self.procs[name].log_tail(6))
        return json.loads((self.folder / f"res-{name}-1").read_text(encoding="utf-8"))

    def go_round(self, **plan) -> int:
        """Every helper's next round, started at once with this plan; its number."""
        self.round += 1
        go(self.folder, self.names, plan, self.round)
        return self.round

    def done(self, round_no: int) -> int:
        """How many helpers have written their result of this round."""
        return sum((self.folder / f"res-{n}-{round_no}").exists() for n in self.names)

    def stop(self) -> None:
        stop(self.folder)
        for proc in self.procs.values():
            proc.stop(grace=3)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
