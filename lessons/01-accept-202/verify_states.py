"""Lesson 01 learner check: walk one job through the state machine in-process.

Run:  python verify_states.py
TestClient calls the app inside this script's own process, so `jobs` here is the
same dict the routes use.  It does not touch a uvicorn server started elsewhere.
"""

from fastapi.testclient import TestClient

from api_states import app, jobs, transition

with TestClient(app) as client:
    submitted = client.post("/exports", json={"product_ids": [1, 2]})
    assert submitted.status_code == 202, submitted.status_code
    job_id = submitted.json()["id"]
    assert submitted.headers["location"] == f"/exports/{job_id}"
    assert client.get(f"/exports/{job_id}").json()["status"] == "queued"

    # Play the worker by hand: start, write a result, finish.
    transition(job_id, "running")
    jobs[job_id]["result"] = {"rows": 2}
    transition(job_id, "succeeded")
    assert client.get(f"/exports/{job_id}").json()["status"] == "succeeded"

    # A finished job must refuse to go back to running.
    try:
        transition(job_id, "running")
    except ValueError:
        print("terminal transition rejected")
    else:
        raise SystemExit("succeeded -> running was accepted; check the allowed table")
    assert jobs[job_id]["status"] == "succeeded"
