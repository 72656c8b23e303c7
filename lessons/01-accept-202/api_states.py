"""Lesson 01: accept an export with 202 and keep its status in a small state machine.

Run:  python -m uvicorn api_states:app --reload   (then try it at /docs)

Nothing executes jobs yet: every job stays "queued".  The records live in this
process's memory only, so a restart forgets them (that is the point of the drill).
"""

from uuid import uuid4

from fastapi import FastAPI, HTTPException, Response
from pydantic import BaseModel, Field

app = FastAPI()

# job_id -> record.  In-memory on purpose: lesson 11 moves this into MySQL.
jobs: dict[str, dict] = {}

# For each state, the states it may move to next.  Terminal states allow nothing,
# so a late worker can never overwrite a finished result.
allowed: dict[str, set[str]] = {
    "queued": {"running", "cancelled"},
    "running": {"succeeded", "failed", "cancelled"},
    "succeeded": set(),
    "failed": set(),
    "cancelled": set(),
}

TERMINAL = {"succeeded", "failed", "cancelled"}


class ExportIn(BaseModel):
    # FastAPI rejects a bad body with 422 before submit_export runs,
    # so an invalid request can never leave a record behind.
    product_ids: list[int] = Field(min_length=1, max_length=100)


def transition(job_id: str, target: str) -> None:
    """Move a job to `target`, or raise ValueError and leave the record untouched."""
    row = jobs[job_id]
    current = row["status"]
    if target not in allowed[current]:
        raise ValueError(f"{current} -> {target} is not allowed")
    row["status"] = target


def as_response(row: dict) -> dict:
    # Exercise: `terminal` is computed from the status on every read.  A copy
    # stored at submit time would still say False after the job finished.
    return {**row, "terminal": row["status"] in TERMINAL}


@app.post("/exports", status_code=202)
async def submit_export(body: ExportIn, response: Response) -> dict:
    job_id = str(uuid4())
    jobs[job_id] = {
        "id": job_id,
        "status": "queued",
        "product_ids": body.product_ids,  # keep the caller's ids, not a derived snapshot
        "result": None,
        "error": None,
    }
    # 202 = accepted, not done: tell the caller where to ask for the outcome.
    response.headers["Location"] = f"/exports/{job_id}"
    return as_response(jobs[job_id])


@app.get("/exports/{job_id}")
async def get_export(job_id: str) -> dict:
    row = jobs.get(job_id)
    if row is None:
        raise HTTPException(status_code=404, detail="export job not found / 导出任务不存在")
    return as_response(row)
