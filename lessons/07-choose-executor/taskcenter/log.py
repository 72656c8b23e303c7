"""Structured logs: one JSON object per line on stdout.

Every task event carries task_id, state, attempt and duration_ms, plus reason,
http_status or error when there is one, so a log search can follow one task and
the same fields can later become span attributes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import IO, Any

_lock = threading.Lock()          # pool threads log too: keep lines whole
_captured: list[list[dict]] = []  # active capture() buffers
_stream: IO[str] | None = None    # None: whatever sys.stdout is at the time


def set_stream(stream: IO[str] | None) -> None:
    """Send the lines elsewhere (a file, os.devnull for a benchmark); None means stdout."""
    global _stream
    _stream = stream


def log(event: str, **fields: Any) -> None:
    record = {"ts": round(time.time(), 3), "event": event}
    record.update((k, v.value if isinstance(v, Enum) else v) for k, v in fields.items())
    line = json.dumps(record, ensure_ascii=False, default=str)
    with _lock:
        for buffer in _captured:
            buffer.append(record)
        out = _stream or sys.stdout
        out.write(line + "\n")
        out.flush()


@contextmanager
def capture() -> Iterator[list[dict]]:
    """Collect the records logged inside the block (they are still printed)."""
    buffer: list[dict] = []
    with _lock:
        _captured.append(buffer)
    try:
        yield buffer
    finally:
        with _lock:
            _captured.remove(buffer)
