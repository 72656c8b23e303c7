"""Lesson 09: the export task, safe to run twice for one job_id.

The final name depends only on job_id, the bytes only on the snapshot, and the file appears in
one step (os.replace), so a duplicate delivery rewrites the same file with the same digest and a
reader never sees half of it.
"""

import hashlib
import json
import os
from pathlib import Path
from uuid import UUID, uuid4

from celery_app import app


@app.task(name="products.export")
def export_products(job_id: str, rows: list[dict]) -> dict:
    safe_id = str(UUID(job_id))
    # sort_keys: the same snapshot always serialises to the same bytes, hence the same digest.
    payload = json.dumps(rows, ensure_ascii=False, sort_keys=True).encode("utf-8")
    folder = Path("artifacts")
    folder.mkdir(exist_ok=True)
    target = folder / f"{safe_id}.json"
    # A name of our own: two executions of one job never write into each other's temp file.
    # Same folder as the target, so os.replace is a rename within one file system (atomic).
    temporary = folder / f"{safe_id}.{uuid4()}.tmp"
    try:
        temporary.write_bytes(payload)
        os.replace(temporary, target)  # readers see the old file or the new one, never a mix
    finally:
        temporary.unlink(missing_ok=True)  # after a failure, only our own leftover goes
    return {"job_id": safe_id, "path": str(target), "sha256": hashlib.sha256(payload).hexdigest()}
