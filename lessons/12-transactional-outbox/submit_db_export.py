"""Lesson 12, step 3: submit a job — MySQL only.  The publisher, not this script, wakes the worker.

Run (stop any running `publisher.py --loop` first, so the event is still unsent when you look):
    python submit_db_export.py
    {'id': '…', 'status': 'queued', 'event_id': '…', 'sent_at': None}
    ready for publisher: …

Then `python publisher.py` sends it and the worker (lesson 11's export_tasks) runs it.
"""

from state_store import submit_snapshot, transaction


def main() -> None:
    with transaction() as cur:
        cur.execute("SELECT MIN(id) AS id FROM products")  # an id that exists; never assume id=1
        product_id = cur.fetchone()["id"]
    if product_id is None:
        raise SystemExit("create a product first")
    job_id = submit_snapshot([product_id])  # job + outbox event, one commit; no delay() any more

    with transaction() as cur:
        cur.execute("""SELECT j.id, j.status, o.id AS event_id, o.sent_at
                       FROM export_jobs j JOIN export_outbox o ON o.job_id = j.id
                       WHERE j.id = %s""", (job_id,))
        row = cur.fetchone()
    if row is None or row["status"] != "queued" or row["sent_at"] is not None:
        raise SystemExit(f"expected a queued job with an unsent event, got {row!r}")
    print(row)
    print("ready for publisher:", job_id)


if __name__ == "__main__":
    main()
