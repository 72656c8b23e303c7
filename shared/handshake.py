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
