"""Lesson 08, step 6: submit one snapshot from a separate process and wait for the outcome.

Run (worker running in another terminal):  python produce_export.py

result.get() is for this command-line check only.  An API handler or another task
must never block on it: see api_submit.py for the request path.
"""

from uuid import uuid4

from export_tasks import export_products

job_id = str(uuid4())
rows = [{"id": 1, "name": "first", "description": "sample product description", "is_active": False,
         "price_cents": 0}]
# task_id=job_id: the message id and the business id are the same here, so the result can be found by it.
result = export_products.apply_async(args=[job_id, rows], task_id=job_id)
print("submitted", result.id)
print(result.get(timeout=15))  # raises celery.exceptions.TimeoutError if no worker answers in time
print("state", result.state)
