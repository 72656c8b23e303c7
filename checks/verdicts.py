"""The verdict channel: how a verifier tells the runner what happened, where learner code cannot.

Verdicts never come from a verifier's stdout (learner code shares it and can print anything).  They
travel as JSON lines on a pipe the runner made for this run only, each signed with HMAC-SHA256 under a
per-run key that reaches the box through another pipe, is read before any learner code is imported and
is then gone from the environment.  A line that is not signed with the run's key, or that comes from
another run, is not a verdict: the runner reports "tampering suspected" instead.

Records: {"type": "launch", "verifier"}, the first thing a verifier process sends (checks/launch.py,
before any learner code runs); {"type": "start", "id"} when a check begins; {"type": "result", "id",
"status", "message", "notes", "seconds"}; {"type": "problem", "message"} for what stops a lesson before
its checks (a schema file that fails, a process that never became ready); {"type": "exit", "verifier",
"code"} when inbox.py saw it end; {"type": "inbox"}, inbox.py's first record.  Every record carries the
pid of the process that sent it: a check's start and result must come from the process that launched as
the verifier, so a copy of it made by fork() (learner code run inside it can fork) is not believed either.
"""


import hashlib
import hmac
import json
import os

KEY_BYTES = 32


def foreign(records: list[dict]) -> int:
    """Records that did not come from whom they should: a start or result from another process than the
    verifier that launched, a second launch before that verifier's exit, or an exit, problem or notice
    from another process than inbox.py (whose first record says which it is)."""
    inbox = next((r.get("pid") for r in records if r["type"] == "inbox"), None)
    verifier, count = None, 0
    for record in records:
        if record["type"] in ("exit", "problem", "notice") and record.get("pid") != inbox:
            count += 1
            continue
        if record["type"] == "launch":
            if verifier is not None:
                count += 1
            else:
                verifier = record.get("pid")
        elif record["type"] == "exit":
            verifier = None
        elif record["type"] in ("start", "result") and (verifier is None or record.get("pid") != verifier):
            count += 1
    return count


def _mac(key: bytes, record: dict) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


class Signer:
    """The writing end, inside the box (inbox.py and each verifier process)."""

    def __init__(self, fd: int, key: bytes, run: str):
        self._fd, self._key, self._run = fd, key, run

    def handoff(self) -> tuple[int, bytes, str]:
        """(channel fd, key, run id): what a judge started apart from this process needs to sign."""
        return self._fd, self._key, self._run

    def close(self) -> None:
        """Give the channel up (a fork of the judge: it must never speak for it)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd, self._key = None, b""

    def send(self, record: dict) -> None:
        if self._fd is None:
            raise OSError("the verdict channel is closed in this process")
        record = dict(record, run=self._run, pid=os.getpid())  # which process: a fork of a verifier is not it
        record["mac"] = _mac(self._key, record)
        data = (json.dumps(record) + "\n").encode()  # ASCII: a lone surrogate in learner text travels too
        while data:  # a pipe write may be partial for long records
            data = data[os.write(self._fd, data):]


class Reader:
    """The reading end, in the runner: turns bytes into verified records.  Bounded: a record longer than
    `record_limit` or more than `total_limit` bytes in all sets `overflowed` (the runner then stops the
    box: "output limit") and nothing more is kept — a line that never ends costs no memory or time."""

    def __init__(self, key: bytes, run: str, record_limit: int, total_limit: int):
        self._key, self._run, self._buffer = key, run, b""
        self._record_limit, self._left = record_limit, total_limit
        self.forged = 0
        self.overflowed = False

    def feed(self, data: bytes) -> list[dict]:
        if self.overflowed:
            return []
        self._left -= len(data)
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if self._left < 0 or len(self._buffer) > self._record_limit or \
                any(len(line) > self._record_limit for line in lines):
            self.overflowed, self._buffer = True, b""
            return []
        records = []
        for raw in lines:
            try:
                record = json.loads(raw)
                mac = record.pop("mac")
                good = isinstance(record, dict) and record.get("run") == self._run and \
                    hmac.compare_digest(str(mac), _mac(self._key, record))
            except (ValueError, KeyError, TypeError, AttributeError):
                good = False
            if good:
                records.append(record)
            else:
                self.forged += 1
        return records


def read_key(fd: int) -> bytes:
    """The key from its pipe (then closed): the only place it ever is, besides the runner's memory."""
    key = b""
    while len(key) < KEY_BYTES:
        chunk = os.read(fd, KEY_BYTES - len(key))
        if not chunk:
            break
        key += chunk
    os.close(fd)
    if len(key) != KEY_BYTES:
        raise SystemExit("verdict key missing")
    return key


def key_pipe(key: bytes) -> int:
    """A pipe holding `key`; returns its reading end (inheritable) for a child to read once."""
    read_end, write_end = os.pipe()
    os.write(write_end, key)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end
