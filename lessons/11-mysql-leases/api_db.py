"""Lesson 11 (kit addition): the HTTP read path — an export's state comes from MySQL, not a cache.

Run:   python -m uvicorn api_db:app --port 8002
       curl -i localhost:8002/exports/<job_id>

404 means exactly one thing: export_jobs has no row with this id.  A job the worker has not
touched yet is 200 'queued' (Celery would call it PENDING); a database that cannot be reached is
503 — never 404, or a client would give up on a job that exists.
"""

import pymysql
from fastapi import FastAPI, HTTPException
from state_store import transaction

app = FastAPI()

FIELDS = ("id", "status", "attempts", "result_ref", "error_code", "deadline_at", "created_at", "updated_at")


# A plain def: FastAPI runs it in a worker thread, so the blocking PyMySQL call never stalls the loop.
@app.get("/exports/{job_id}")
def read_export(job_id: str) -> dict:
    try:
        with transaction() as cur:
            cur.execute(f"SELECT {', '.join(FIELDS)} FROM export_jobs WHERE id=%s", (job_id,))
            row = cur.fetchone()
    except pymysql.MySQLError:
        # Unknown is not missing.  Say "try again", and keep the server's message out of the answer.
        raise HTTPException(status_code=503, detail="the job store is unavailable",
                            headers={"Retry-After": "5"}) from None
    if row is None:
        raise HTTPException(status_code=404, detail="no such export")
    for key in ("deadline_at", "created_at", "updated_at"):  # DATETIMEs are UTC (connect sets the session)
        row[key] = row[key].isoformat() + "Z"
    return row
