"""Runs in a probe next to the learner's modules (shared/probe.py): the call lesson 11's judge cannot make
by name — finding the exercise's renewal function (its task is used through shared.lesson_celery.LearnerTask).
Plain data out; the judge decides."""

import inspect
import re


def _takes_job_and_token(fn) -> bool:
    required = [p for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(required) == 2


def renewal_candidates(course_functions: list[str]) -> list[str]:
    """The learner's own functions in state_store taking (job_id, token), the course's names left out;
    only those named like a renewal (renew, extend, heartbeat, lease) when there are any."""
    import state_store
    own = [(name, fn) for name, fn in inspect.getmembers(state_store, inspect.isfunction)
           if fn.__module__ == state_store.__name__ and not name.startswith("_") and name not in course_functions]
    named = [(n, f) for n, f in own if re.search(r"renew|extend|heartbeat|lease", n, re.I)]
    return [n for n, f in (named or own) if _takes_job_and_token(f)]
