"""Lessons 11, 15 and 16: the export task, now writing one JSON phase line per step it takes.

Workers (restart both after replacing this file; lesson 13's split queues):
    python -m celery -A celery_app:app worker -l INFO -Q exports.fast --concurrency=1 -n fast@%h
    python -m celery -A celery_app:app worker -l INFO -Q exports.bulk --concurrency=1 -n bulk@%h
Stop one with a single TERM (or the first Ctrl+C) to its main process: a warm shutdown that lets the
running export finish.  A second signal or KILL is a cold shutdown: the lease and recovery take over.

1. claim        short transaction #1: lease + token, committed before any file work              -> phase "claimed"
2. check        lesson 15: can_continue at the work boundary — stop if cancelled, expired or taken over
3. write        no transaction open: artifacts/<job_id>.<token>.json, a name no other claim uses
4. finish       short transaction #2: publish the path only if this token still owns a live lease
                (and the job is not cancelled: a cancel between 2 and 4 is caught here)
                                                                         -> phase "published", success=…

Lesson 16: bind=True gives the task its request, so every line carries self.request.id — the id of
this delivery (the outbox event id).  Two deliveries of one event share it; two claims never share a
lease_token.  The public task name stays products.export.  Lines hold ids, never the payload.
"""

import json
from pathlib import Path
from uuid import UUID

from celery_app import app
from state_store import can_continue, claim, finish
from task_logging import log_phase


@app.task(name="products.export", bind=True)
def export_products(self, job_id: str) -> dict:
    job_id = str(UUID(job_id))  # a malformed id fails here, before any database work
    message_id = self.request.id
    try:
        job = claim(job_id)
    except Exception as exc:
        # Nothing is held yet: the job stays queued and the recovery scan dispatches it again.
        # The type and the ids are enough to find it; the message text may quote connection details.
        log_phase(job_id, "claim_error", message_id, error_type=type(exc).__name__)
        raise
    if job is None:
        # Not claimable now: running elsewhere, backing off, finished, cancelled or out of attempts.
        # The line makes the extra delivery visible; the message is still acknowledged.
        log_phase(job_id, "not_claimed", message_id)
        return {"job_id": job_id, "claimed": False}
    token = str(job["lease_token"])
    attempt = job["attempts"]
    log_phase(job_id, "claimed", message_id, token, attempt)
    try:
        # The work boundary: a cancel, the deadline or a lost lease since the claim means stop here.
        # A job with several chunks asks again before each one; this export has a single write.
        if not can_continue(job_id, token):
            log_phase(job_id, "published", message_id, token, attempt, success=False, reason="cannot_continue")
            return {"job_id": job_id, "claimed": True, "attempt": attempt, "published": False}
        folder = Path("artifacts")
        folder.mkdir(exist_ok=True)
        # One file per claim: an old execution finishing late can never overwrite the published file.
        target = folder / f"{job['id']}.{token}.json"
        target.write_text(json.dumps(job["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")
        published = finish(job_id, token, str(target))
    except Exception as exc:
        log_phase(job_id, "error", message_id, token, attempt, error_type=type(exc).__name__)
        raise
    # success is finish's real answer: False means the lease moved on or a cancel arrived, and our
    # file is simply not the result.
    log_phase(job_id, "published", message_id, token, attempt, success=published)
    return {"job_id": job_id, "claimed": True, "attempt": attempt, "published": published}
