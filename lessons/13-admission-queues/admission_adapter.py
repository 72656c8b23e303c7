"""Lesson 13: the HTTP face of admission — a full service answers 503 with Retry-After, never a fake 202.

accept_export is what an HTTP submit route calls (api_db.py's POST /exports does).  It adds no
state of its own: the job row and its outbox event are the only record, written by submit_snapshot.

    submit committed          -> {"job_id": ...}   (the route answers 202)
    CapacityExceeded          -> 503, Retry-After: 5, and nothing was written (the transaction rolled back)
    invalid product ids       -> 422 with the reason
"""

from fastapi import HTTPException
from state_store import CapacityExceeded, submit_snapshot


def accept_export(product_ids: list[int]) -> dict:
    try:
        job_id = submit_snapshot(product_ids)
    except CapacityExceeded as exc:
        # The whole service is full (not one user's quota, which would be 429): "come back soon".
        raise HTTPException(
            status_code=503,
            detail="export capacity is full, please retry later",
            headers={"Retry-After": "5"},
        ) from exc
    except ValueError as exc:
        # read_snapshot's messages name the problem (range, type, unknown ids) and never hold secrets.
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    # Only here, after the commit inside submit_snapshot, does a job id exist to hand out.
    return {"job_id": job_id}
