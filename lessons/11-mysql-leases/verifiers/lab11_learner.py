"""Runs in a probe next to the learner's modules (shared/probe.py): the few calls lesson 11's judge
cannot make by name — sending with the learner's task, reading its Celery state, finding the exercise's
renewal function.  Plain data out; the judge decides."""

import inspect
import re


def delay(job_id: str) -> str:
    """export_products.delay(job_id): the message's id."""
    from export_tasks import export_products
    return export_products.delay(job_id).id


def celery_state(task_id: str) -> str:
    from export_tasks import export_products
    return export_products.AsyncResult(task_id).state


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
