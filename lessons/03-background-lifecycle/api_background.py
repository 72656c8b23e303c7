"""Lesson 03: run a short export after the 202 has been sent — inside this app process.

Run it with   python -m uvicorn api_background:app
(without --reload: a reload restarts the process, and a restart is exactly
what wipes the in-memory jobs this lesson is about).

POST /exports (lesson 01) still only accepts; POST /exports/background also
does the work.  Both are read back through lesson 01's GET /exports/{job_id}.
"""

import asyncio
import logging
from uuid import uuid4

from fastapi import BackgroundTasks, Response

from api_states import ExportIn, app, jobs, transition

log = logging.getLogger(__name__)


async def local_export(job_id: str) -> None:
    """The export itself.  It runs after the response, so only the job record can report its outcome."""
    transition(job_id, "running")
    try:
        await asyncio.sleep(1)  # stands in for building the two-row list
        row = jobs[job_id]
        row["result"] = {"rows": len(row["product_ids"])}
        transition(job_id, "succeeded")
    except asyncio.CancelledError:
        # The server is shutting down and cancelled us: say so in the record, then keep
        # cancelling — swallowing it would make the shutdown wait for nothing.
        transition(job_id, "cancelled")
        raise
    except Exception as exc:
        # The client already has its 202; a 500 can no longer reach it.  Record the failure
        # on the job, and log it with the job id so the terminal output can be traced back.
        jobs[job_id]["error"] = type(exc).__name__
        transition(job_id, "failed")
        log.exception("export %s failed", job_id)


@app.post("/exports/background", status_code=202)
async def submit_local(body: ExportIn, background: BackgroundTasks, response: Response):
    job_id = str(uuid4())
    jobs[job_id] = {"id": job_id, "status": "queued",
                    "product_ids": body.product_ids, "result": None, "error": None}
    # add_task only registers the call; Starlette runs it after this response is sent.
    background.add_task(local_export, job_id)
    response.headers["Location"] = f"/exports/{job_id}"
    return jobs[job_id]
