"""A pause the checker releases, inside a learner's worker: the one hold/release gate of the kit.

A lesson's worker wrapper (labNN_worker.py, imported by the worker before the learner's modules) makes one:

    gate = Gate(FOLDER, "lab11", HOLD_LIST, backstop=25.0, record=record)
    gate.hold_first_writes()          # the first write-mode open() of a held job's file waits

or, with the kit's file names (labNN-events.jsonl, labNN-hold.txt in $TASKLAB_LOG_DIR), probe_gate("labNN", …);
the checker's side of that gate is HoldList(LOG_DIR, "labNN").

The checker lists what to hold in HOLD_LIST (a job id per line, or "PHASE JOB" for a gate with phases)
and releases it by creating FOLDER/<prefix>-release-<job> (or -<phase>-<job>).  Only the first pause of
each job (and phase) waits, across every pool child (an O_EXCL marker).  Each pause records a "hold"
event when it starts and a "release" event (released: was the file there, or did the backstop end it)
when it ends: the checker reads facts, never timings.  The backstop only keeps a worker whose checker
died from waiting for ever.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
import time
from pathlib import Path

from shared.events import append_event, read_events
from shared.proc import WaitTimeout, wait_until


def read_list(path: str, phase: str | None = None) -> list[str]:
    """The ids in a list the checker writes (one per line, or "PHASE ID" lines for `phase`).  os-level
    reads only: this also runs inside the open() wrapper."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        text = os.read(fd, 1 << 20).decode(errors="replace")
    finally:
        os.close(fd)
    if phase is None:
        return text.split()
    return [parts[1] for parts in (line.split() for line in text.splitlines())
            if len(parts) == 2 and parts[0] == phase]


class Gate:
    def __init__(self, folder: str, prefix: str, hold_list: str, backstop: float, record):
        self.folder, self.prefix, self.hold_list = folder, prefix, hold_list
        self.backstop, self.record = backstop, record

    def listed(self, phase: str | None = None) -> list[str]:
        """The jobs held (for `phase`)."""
        return read_list(self.hold_list, phase)

    def first_time(self, name: str) -> bool:
        """True once per marker name across all pool children (O_EXCL)."""
        try:
            os.close(os.open(os.path.join(self.folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return True
        except FileExistsError:
            return False

    def pause(self, job: str, phase: str | None = None, **fields) -> None:
        """Wait here until the checker releases this job (the first time only)."""
        key = f"{phase}-{job}" if phase else job
        if not self.first_time(f"{self.prefix}-held-{key}"):
            return
        ident = {"phase": phase, "job": job} if phase else {"job": job}
        self.record("hold", **ident, **fields)
        release = os.path.join(self.folder, f"{self.prefix}-release-{key}")
        until = time.monotonic() + self.backstop
        while not os.path.exists(release) and time.monotonic() < until:
            time.sleep(0.02)
        self.record("release", **ident, **fields, released=os.path.exists(release))

    def hold_first_writes(self, phase: str | None = None) -> None:
        """Wrap open(): the first write-mode open of a file whose path holds a held job id pauses.
        Installed before the learner's modules load, so a module-level `open` binding sees it too;
        Path.write_text / write_bytes / open() all go through io.open."""
        real_open = io.open

        def held_open(file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and any(flag in mode for flag in "wax+") and \
                    isinstance(file, (str, bytes, os.PathLike)):
                path = os.fsdecode(os.fspath(file))
                job = next((j for j in self.listed(phase) if j and j in path), None)
                if job:
                    self.pause(job, phase, path=path)
            return real_open(file, mode, *args, **kwargs)

        io.open = held_open
        builtins.open = held_open


def probe_gate(prefix: str, backstop: float, phase: str | None = None) -> Gate:
    """In a lesson's probe, before the learner's modules load: its event recorder (gate.record, one JSON line
    per event in $TASKLAB_LOG_DIR/PREFIX-events.jsonl) and its gate on PREFIX-hold.txt, first writes held."""
    folder = os.environ.get("TASKLAB_LOG_DIR") or "."
    record = functools.partial(append_event, os.path.join(folder, f"{prefix}-events.jsonl"))
    gate = Gate(folder, prefix, os.path.join(folder, f"{prefix}-hold.txt"), backstop=backstop, record=record)
    gate.hold_first_writes(phase)
    return gate


class HoldList:
    """The checker's side of a probe_gate(prefix): which jobs to hold, their release, the probe's "hold" events."""

    def __init__(self, folder: str | Path, prefix: str):
        self.folder, self.prefix = Path(folder), prefix
        self.path = self.folder / f"{prefix}-hold.txt"
        self.events = self.folder / f"{prefix}-events.jsonl"

    def hold(self, *jobs: str, phase: str | None = None) -> None:
        """The first pause of each of these jobs (at `phase`) will wait for release()."""
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.writelines(f"{phase} {job}\n" if phase else f"{job}\n" for job in jobs)

    def release(self, *jobs: str, phase: str | None = None) -> None:
        for job in jobs:
            key = f"{phase}-{job}" if phase else job
            (self.folder / f"{self.prefix}-release-{key}").touch()

    def holds(self, job: str, phase: str | None = None) -> list[dict]:
        """The probe's "hold" events of this job (at `phase`): a worker reached its pause."""
        ident = {"phase": phase, "job": job} if phase else {"job": job}
        return read_events(self.events, kind="hold", **ident)

    def wait_held(self, jobs: list[str], seconds: float, what: str, phase: str | None = None,
                  interval: float = 0.05, late=None) -> dict:
        """The first "hold" event of any of these jobs, once a worker is held there.  If none is: WaitTimeout,
        or with `late` a failed check that says late() (a lesson's own words)."""
        try:
            return wait_until(lambda: next((held[0] for j in jobs if (held := self.holds(j, phase))), None), seconds,
                              what, interval=interval)
        except WaitTimeout:
            if late is None:
                raise
            raise AssertionError(late()) from None
