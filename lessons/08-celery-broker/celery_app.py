"""Lesson 08: the one Celery application that the worker and every producer import.

Worker:  python -m celery -A celery_app:app worker -l INFO -Q exports --concurrency=2
         (start it in tasks_lab: the worker imports celery_app and export_tasks from there)
"""

import os

from celery import Celery
from dotenv import load_dotenv

# Read the local file on every start; a variable a deployment already set wins over it.
load_dotenv(".env.tasks")

app = Celery(
    "shop_service",
    broker=os.environ["CELERY_BROKER_URL"],        # redis://:<password>@127.0.0.1:6384/0
    backend=os.environ["CELERY_RESULT_BACKEND"],   # the same server, DB 1: short-lived results only
    include=["export_tasks"],                      # what the worker imports to learn task names
)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],      # a worker that unpickles messages runs whatever the sender wrote
    result_expires=3600,          # results are a one-hour cache, not the job's record
    task_default_queue="exports",
    task_track_started=True,      # STARTED shows up while the task runs
    broker_connection_timeout=3,  # fail fast when the broker is down instead of hanging the caller
)
