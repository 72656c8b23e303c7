"""Lesson 10, step 3: one export that recovers after two failures, one that is already too late.

Run (worker restarted with retry_tasks in include):  python verify_retry.py
    {'job_id': '...', 'rows': 1}
    RuntimeError export deadline exceeded

get() only bounds how long this terminal waits; the task's own limit is deadline_epoch.
"""

import time
from uuid import uuid4

from retry_tasks import retry_export

ok = retry_export.delay(str(uuid4()), time.time() + 30, 2)
print(ok.get(timeout=35))

expired = retry_export.delay(str(uuid4()), time.time() - 1, 0)
try:
    expired.get(timeout=10)
except Exception as exc:  # the worker's error, rebuilt here: print its type and message
    print(type(exc).__name__, str(exc))
