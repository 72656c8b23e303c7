"""Lesson 08 (kit addition): the HTTP side of a Celery export — enqueue, answer 202, never wait.

Run:  python -m uvicorn api_submit:app --port 8001
      curl -i -X POST localhost:8001/exports/celery -H 'content-type: application/json' \
           -d '{"rows": [{"id": 1, "name": "first", "description": "", "is_active": true, "price_cents": 0}]}'

The handler only publishes the message.  Whether a worker is up, busy or stopped, the
answer is the same fast 202; the work happens later in the worker process.
"""

from uuid import uuid4

from export_tasks import export_products
from fastapi import FastAPI, HTTPException, Response
from kombu.exceptions import OperationalError
from pydantic import BaseModel, Field

app = FastAPI()


class ProductRow(BaseModel):
    id: int
    name: str = Field(max_length=120)
    description: str = Field(max_length=1000)
    is_active: bool
    price_cents: int = Field(ge=0)


class SnapshotIn(BaseModel):
    rows: list[ProductRow] = Field(min_length=1, max_length=100)


# A plain `def`: FastAPI runs it in a thread, so a slow broker cannot stall the event loop.
@app.post("/exports/celery", status_code=202)
def submit_celery_export(body: SnapshotIn, response: Response) -> dict:
    job_id = str(uuid4())
    rows = [row.model_dump() for row in body.rows]
    try:
        export_products.apply_async(args=[job_id, rows], task_id=job_id)
    except OperationalError:
        # Broker unreachable: say so now; the caller may retry.  Never log the broker URL.
        raise HTTPException(status_code=503, detail="the task broker is unavailable") from None
    # No result.get() here: waiting would tie this request to the worker's speed and uptime.
    response.headers["Location"] = f"/exports/celery/{job_id}"
    return {"id": job_id, "status": "submitted"}


@app.get("/exports/celery/{job_id}")
def read_celery_export(job_id: str) -> dict:
    # The result backend is a cache with a TTL: PENDING also means "unknown" or "expired".
    # Lesson 11 keeps the job's real state in MySQL.
    result = export_products.AsyncResult(job_id)
    return {"id": job_id, "state": result.state,
            "result": result.result if result.successful() else None}
