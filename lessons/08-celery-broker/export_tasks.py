"""Lesson 08: the export task.  The worker runs it; producers only send its name and arguments."""

import json
from pathlib import Path
from uuid import UUID

from celery_app import app


@app.task(name="products.export")  # the stable name is the contract between producer and worker
def export_products(job_id: str, rows: list[dict]) -> dict:
    # The id becomes part of a file name: accept only a real UUID, never something like "../x".
    safe_id = str(UUID(job_id))
    folder = Path("artifacts")  # relative to the worker's working directory (tasks_lab)
    folder.mkdir(exist_ok=True)
    target = folder / f"{safe_id}.json"
    target.write_text(json.dumps(rows, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    # A relative path: it means something on the worker's machine only, and leaks no home folder.
    return {"job_id": safe_id, "path": str(target), "rows": len(rows)}
