"""Lesson 16, step 1: one JSON line per phase of an export, tied together by ids — never by content.

    from task_logging import log_phase
    log_phase(job_id, "claimed", self.request.id, token, job["attempts"])
    log_phase(job_id, "published", self.request.id, token, job["attempts"], success=published)

Each line answers "which job, which delivery, which right to run, which try":
    job_id       the business job (export_jobs.id) — the thread through every line
    message_id   one delivery of a message (the Celery task id = the outbox event id)
    lease_token  one claim; a redelivery that claims again gets a new token
    attempt      export_jobs.attempts after the claim (real executions, not deliveries)

What never goes in: the payload (product names and descriptions), connection URLs, passwords.
Extra fields must be plain values (a number, a short text, True/False); anything bigger is
replaced by a marker, so a careless `job=job` cannot copy a whole snapshot into the logs.
"""

import json
import logging

logger = logging.getLogger("shop.exports")

PLAIN = (str, int, float, bool, type(None))
MAX_TEXT = 200  # error messages can be long; a log line is not a place for a dump


def _plain(value):
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"
    if isinstance(value, PLAIN):
        return value
    return f"<{type(value).__name__} left out>"


def log_phase(job_id, phase, message_id=None, lease_token=None, attempt=None, **fields):
    """Write one structured line for this phase of one job."""
    record = {
        "event": "export_phase",
        "job_id": str(job_id),
        "phase": phase,
        "message_id": None if message_id is None else str(message_id),
        "lease_token": str(lease_token) if lease_token else None,
        "attempt": attempt,
    }
    for key, value in fields.items():
        if key not in record:  # the id fields above cannot be overwritten by an extra field
            record[key] = _plain(value)
    logger.info(json.dumps(record, ensure_ascii=False))
