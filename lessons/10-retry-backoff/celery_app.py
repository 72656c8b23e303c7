"""Lesson 10: the Celery application; retry_tasks joins the modules the worker imports.

Worker:  python -m celery -A celery_app:app worker -l INFO -Q exports --concurrency=2
         (restart it after every change here: a running worker keeps the settings it started with)
"""

import os

from celery import Celery
from dotenv import load_dotenv

# Read the local file on every start; a variable a deployment already set wins over it.
load_dotenv(".env.tasks")

app = Celery(
    "shop_service",
    broker=os.environ["CELERY_BROKER_URL"],
    backend=os.environ["CELERY_RESULT_BACKEND"],
    include=["export_tasks", "retry_tasks"],  # a new task module is unknown to the worker until listed here
)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    task_default_queue="exports",
    task_track_started=True,
    broker_connection_timeout=3,
)

# Lesson 09: delivery settings.  Local tasks finish in well under 30 s; 60 s leaves room.
VISIBILITY_SECONDS = 60
app.conf.update(
    # Ack after the function returns: a crash mid-task leaves the message unacknowledged, so it can
    # come back.  The price: a crash after the side effect but before the ack runs the task twice.
    task_acks_late=True,
    # A pool child killed mid-task (SIGKILL, OOM) would otherwise still be acked as "failed";
    # this puts the message back instead.  A message that kills its child every time loops forever
    # until a durable attempt limit stops it (lesson 15).
    task_reject_on_worker_lost=True,
    # Reserve one message per process: a busy worker does not sit on messages others could run.
    worker_prefetch_multiplier=1,
    broker_transport_options={
        # An unacked message is handed out again once it is this old.  It must be longer than the
        # slowest task plus its waits, or healthy long tasks get duplicated again and again.
        "visibility_timeout": VISIBILITY_SECONDS,
        "socket_timeout": 3,
        "socket_connect_timeout": 3,
        # The sweep that returns the unacked messages of a worker that died as a whole runs every
        # interval × throttle seconds (10 × 10 ≈ 100 s by default); make it every 5 s.
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
    },
    result_backend_transport_options={"visibility_timeout": VISIBILITY_SECONDS},
    visibility_timeout=VISIBILITY_SECONDS,  # Celery's Redis notes require this one as well
)
