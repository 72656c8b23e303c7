"""Lesson 11, step 5: submit a snapshot job, wake the worker with only its id, read the row back.

Run (worker running, lesson 11's export_tasks):  python submit_db_export.py
    {'id': '…', 'status': 'queued', 'attempts': 0, 'result_ref': None}
    {'id': '…', 'status': 'succeeded', 'attempts': 1, 'result_ref': 'artifacts/….json'}
    file matches the payload: True

Right after delay() the row may still be queued or running: the worker runs on its own time.
Between the commit and delay() there is still a gap (a crash there leaves a queued job with no
message); lesson 12's outbox closes it.
"""

import json
import time
from pathlib import Path

from export_tasks import export_products
from state_store import decode_payload, submit_snapshot, transaction

TERMINAL = ("succeeded", "failed", "cancelled")


def read_job(job_id: str) -> dict | None:
    # Even a read ends its transaction and closes the connection (transaction() does both).
    with transaction() as cur:
        cur.execute("SELECT id, status, attempts, result_ref, payload FROM export_jobs WHERE id=%s", (job_id,))
        return cur.fetchone()


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")  # an id that exists; never assume id=1
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")
    job_id = submit_snapshot([product_id])
    export_products.delay(job_id)  # the message carries the id only; the row carries the input

    shown = lambda job: {key: job[key] for key in ("id", "status", "attempts", "result_ref")}  # noqa: E731
    job = read_job(job_id)
    print(shown(job))
    waited_until = time.monotonic() + 20  # a bounded look, not a promise: the job may still finish later
    while job["status"] not in TERMINAL and time.monotonic() < waited_until:
        time.sleep(0.2)
        job = read_job(job_id)
    print(shown(job))
    if job["status"] == "succeeded":
        written = json.loads(Path(job["result_ref"]).read_text(encoding="utf-8"))
        print("file matches the payload:", written == decode_payload(job["payload"]))


if __name__ == "__main__":
    main()
