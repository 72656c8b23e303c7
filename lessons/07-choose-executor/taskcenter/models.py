"""Task states, the only moves allowed between them, and the task record."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class State(str, Enum):
    # Stored as these strings, so `sqlite3 tasks.db "select state ..."` stays readable.
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL: frozenset[State] = frozenset({State.SUCCESS, State.FAILED, State.CANCELED})

# The whole state machine.  RUNNING -> PENDING is "try again later" (a retry, a crash
# recovery or a graceful stop); a terminal state has no way out.
ALLOWED: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.RUNNING, State.CANCELED}),
    State.RUNNING: frozenset({State.PENDING, State.SUCCESS, State.FAILED, State.CANCELED}),
    State.SUCCESS: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELED: frozenset(),
}


class IllegalTransition(Exception):
    """A move the table above does not allow, e.g. success -> pending."""

    def __init__(self, src: State, dst: State) -> None:
        super().__init__(f"illegal transition {src.value} -> {dst.value}")
        self.src = src
        self.dst = dst


def transit(src: State, dst: State) -> State:
    """Return dst if src may move there, else raise IllegalTransition."""
    if dst not in ALLOWED[src]:
        raise IllegalTransition(src, dst)
    return dst


@dataclass(frozen=True)
class Task:
    id: str
    state: State
    url: str
    body: bytes
    idempotency_key: str
    attempt: int          # downstream calls started so far (the store is the only counter)
    max_attempts: int     # hard cap on calls, the first one included
    not_before: float     # a pending task is not claimed before this time (retry backoff)
    result: bytes | None
    error: str | None
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL
