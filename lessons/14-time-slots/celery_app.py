"""Lessons 08–14: the Celery application.  Lesson 14 adds schedule_tasks and the beat schedule.

Workers (lesson 13; restart them after every change here: a running worker keeps its settings):
    python -m celery -A celery_app:app worker -l INFO -Q exports.fast --concurrency=1 -n fast@%h
    python -m celery -A celery_app:app worker -l INFO -Q exports.bulk --concurrency=1 -n bulk@%h
Beat (lesson 14; exactly ONE, with a schedule file of its own):
    python -m celery -A celery_app:app beat -l INFO --schedule=./beat-lab.db
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
    include=["export_tasks", "retry_tasks", "schedule_tasks"],  # a task module is unknown to the worker until listed
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

# Lesson 14: the periodic signal.  beat only SENDS products.schedule_tick; a worker runs it and turns
# it into at most one job per UTC minute (schedule_tasks.py, schedule_store.py).
TICK_SECONDS = 60.0
app.conf.timezone = "UTC"  # beat's clock and its log lines in UTC, like the slot names
app.conf.beat_schedule = {
    "export-each-minute": {
        "task": "products.schedule_tick",
        "schedule": TICK_SECONDS,
        # The tick itself is tiny: the fast queue.  The export it creates goes to exports.bulk
        # through the outbox (publisher.py), so a slow export never delays the next tick.
        "options": {"queue": "exports.fast"},
    },
}
