"""Lesson 09, step 3: deliver one job twice, as two different messages, and compare the outcome.

Run (worker running):  python duplicate_export.py   ->  same logical output {...}

The message id (task_id) names one delivery; job_id names the business export.  Reusing one
task_id would only overwrite one cached result: it proves nothing about duplicates.
"""

from uuid import uuid4

from export_tasks import export_products

job_id = str(uuid4())
rows = [{"id": 1, "name": "fixed snapshot", "description": "", "is_active": False, "price_cents": 0}]
first = export_products.apply_async(args=[job_id, rows], task_id=str(uuid4()))
second = export_products.apply_async(args=[job_id, rows], task_id=str(uuid4()))
a, b = first.get(timeout=15), second.get(timeout=15)
assert first.id != second.id, "the two deliveries must be two messages"
assert a["path"] == b["path"], f"different paths: {a['path']} != {b['path']}"
assert a["sha256"] == b["sha256"], "different digests for one job and one snapshot"
print("same logical output", a)
