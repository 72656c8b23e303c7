"""What tests look for among the machine's processes (a pid inside a box means nothing outside it)."""

from __future__ import annotations

import uuid
from pathlib import Path


def marker() -> str:
    """A unique word to put in a test process's command line."""
    return f"mark-{uuid.uuid4().hex}"


def alive_with(mark: str) -> list[int]:
    """Live processes whose command line carries `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
