"""Lessons 11–13 (kit addition): the HTTP side of the MySQL job store.

Run:   python -m uvicorn api_db:app --port 8002
       curl -i -X POST localhost:8002/exports -H 'content-type: application/json' -d '{"product_ids": [3, 7]}'
       curl -i localhost:8002/exports/<job_id>

POST /exports (lesson 13) admits through admission_adapter.accept_export: 202 with the job id once
job and outbox event have committed; 503 with Retry-After: 5 when the service is at capacity, and
then nothing was created.  GET /exports/{id} (lesson 11) reads MySQL: 404 means exactly one thing,
export_jobs has no row with this id; a database that cannot be reached is 503, never 404.
"""

import pymysql
from admission_adapter import accept_export
from fastapi import FastAPI, HTTPException, Response
from pydantic import BaseModel, StrictInt
from state_store import transaction

app = FastAPI()

FIELDS = ("id", "status", "attempts", "result_ref", "error_code", "deadline_at", "created_at", "updated_at")


class ExportIn(BaseModel):
    # StrictInt: "7", 7.0 or true are refused here (422) instead of being quietly turned into ids;
    # read_snapshot checks the rest (1..100 positive ids, all existing).
    product_ids: list[StrictInt]


# Plain defs: FastAPI runs them in a worker thread, so blocking PyMySQL calls never stall the loop.
@app.post("/exports", status_code=202)
def submit_export(body: ExportIn, response: Response) -> dict:
    try:
        accepted = accept_export(body.product_ids)
    except pymysql.MySQLError:
        # The store did not answer (or a lock wait ran out): nothing is known to be accepted.
        raise HTTPException(status_code=503, detail="the job store is unavailable",
                            headers={"Retry-After": "5"}) from None
    response.headers["Location"] = f"/exports/{accepted['job_id']}"
    return accepted


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
