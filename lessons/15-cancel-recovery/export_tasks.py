"""Lessons 11 and 15: the export task receives only a job_id; MySQL holds the input and decides who publishes.

Workers (restart both after replacing this file; lesson 13's split queues):
    python -m celery -A celery_app:app worker -l INFO -Q exports.fast --concurrency=1 -n fast@%h
    python -m celery -A celery_app:app worker -l INFO -Q exports.bulk --concurrency=1 -n bulk@%h
Stop one with a single TERM (or the first Ctrl+C) to its main process: a warm shutdown that lets the
running export finish.  A second signal or KILL is a cold shutdown: the lease and recovery take over.

1. claim        short transaction #1: lease + token, committed before any file work
2. check        lesson 15: can_continue at the work boundary — stop if cancelled, expired or taken over
3. write        no transaction open: artifacts/<job_id>.<token>.json, a name no other claim uses
4. finish       short transaction #2: publish the path only if this token still owns a live lease
                (and the job is not cancelled: a cancel between 2 and 4 is caught here)

A message is only a wake-up call.  A duplicate, late or replayed message claims nothing and
publishes nothing; an execution whose lease was taken over leaves at most an unreferenced file.
"""

import json
from pathlib import Path
from uuid import UUID

from celery_app import app
from state_store import can_continue, claim, finish


@app.task(name="products.export")
def export_products(job_id: str) -> dict:
    job_id = str(UUID(job_id))  # a malformed id fails here, before any database work
    job = claim(job_id)
    if job is None:
        # Not claimable now: running elsewhere, backing off, finished, cancelled or out of attempts.
        # The message is still acknowledged; the row in export_jobs is what users and recovery read.
        return {"job_id": job_id, "claimed": False}
    token = str(job["lease_token"])
    # The work boundary: a cancel, the deadline or a lost lease since the claim means stop here.
    # A job with several chunks asks again before each one; this export has a single write.
    if not can_continue(job_id, token):
        return {"job_id": job_id, "claimed": True, "attempt": job["attempts"], "published": False}
    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    # One file per claim: an old execution finishing late can never overwrite the published file.
    target = folder / f"{job['id']}.{token}.json"
    target.write_text(json.dumps(job["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")
    published = finish(job_id, token, str(target))
    # published False: the lease expired or moved on while we worked; our file is simply not the result.
    return {"job_id": job_id, "claimed": True, "attempt": job["attempts"], "published": published}
