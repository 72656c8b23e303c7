"""Lesson 11: the export task now receives only a job_id; MySQL holds the input and decides who publishes.

Worker (restart it after replacing this file; stop the lesson 08–09 producers that still send rows):
    python -m celery -A celery_app:app worker -l INFO -Q exports --concurrency=2

1. claim        short transaction #1: lease + token, committed before any file work
2. write        no transaction open: artifacts/<job_id>.<token>.json, a name no other claim uses
3. finish       short transaction #2: publish the path only if this token still owns a live lease

A message is only a wake-up call.  A duplicate, late or replayed message claims nothing and
publishes nothing; an execution whose lease was taken over leaves at most an unreferenced file.
"""

import json
from pathlib import Path
from uuid import UUID

from celery_app import app
from state_store import claim, finish


@app.task(name="products.export")
def export_products(job_id: str) -> dict:
    job_id = str(UUID(job_id))  # a malformed id fails here, before any database work
    job = claim(job_id)
    if job is None:
        # Not claimable now: running elsewhere, backing off, finished, cancelled or out of attempts.
        # The message is still acknowledged; the row in export_jobs is what users and recovery read.
        return {"job_id": job_id, "claimed": False}
    token = str(job["lease_token"])
    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    # One file per claim: an old execution finishing late can never overwrite the published file.
    target = folder / f"{job['id']}.{token}.json"
    target.write_text(json.dumps(job["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")
    published = finish(job_id, token, str(target))
    # published False: the lease expired or moved on while we worked; our file is simply not the result.
    return {"job_id": job_id, "claimed": True, "attempt": job["attempts"], "published": published}
