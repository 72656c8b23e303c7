"""Which outcomes deserve another try, and how long to wait before it.

    4xx                      the request itself is wrong: the same call fails the same way -> no retry
    5xx, timeout, connection the downstream or the network had a bad moment        -> retry
    anything else            a bug or a bad URL on our side                        -> no retry

(429 would deserve a retry honouring Retry-After; this small center treats it as 4xx.)
Retries back off exponentially with jitter, so tasks that failed together do not all
come back at the same instant, and the wait is capped.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.2
    cap_s: float = 8.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Wait after failed attempt N (1-based): the ceiling min(cap, base * 2**(N-1)),
        and a random point in its upper half ("equal jitter"), so never above the cap."""
        ceiling = min(self.cap_s, self.base_s * 2 ** (max(attempt, 1) - 1))
        return ceiling / 2 + rand() * ceiling / 2


@dataclass(frozen=True)
class RetryPlan:
    retry: bool
    delay_s: float
    reason: str


def classify(status: int | None, exc: BaseException | None, attempt: int, max_attempts: int,
             backoff: Backoff = Backoff()) -> RetryPlan:
    """Decide after a failed attempt.  `attempt` counts calls made so far, the first included."""
    if exc is not None:
        reason = type(exc).__name__
        retryable = isinstance(exc, (TimeoutError, ConnectionError))
    elif status is None:
        raise ValueError("classify needs a status or an exception")
    else:
        reason = f"http_{status}"
        retryable = 500 <= status <= 599
    if not retryable:
        return RetryPlan(False, 0.0, reason)
    if attempt >= max_attempts:
        return RetryPlan(False, 0.0, f"{reason}, gave up after {attempt} of {max_attempts} attempts")
    return RetryPlan(True, backoff.delay(attempt), reason)
