"""Kit helper processes for lesson 15's checks (not a lesson file).  Each runs the learner's code.

    python lab15_tools.py fast-forward          python verify_retry_gate.py, its sleeps fast-forwarded (15.5):
                                               each sleep moves the script's jobs' next_attempt_at back by
                                               as much instead of waiting; reports the jobs
                                               it made (shared/probe_report.py)
    python lab15_tools.py scan FOLDER NAME      one recovery.recover_batch() on the checker's go (15.4)
    python lab15_tools.py publish FOLDER NAME   one publisher.publish_one() on the checker's go (15.6)

scan and publish run on the checker's go (shared/handshake.py) and write {"value": …} or {"error": …}.  With
{"hold": true} in the plan they stop right after the first statement that takes row locks (for publish, the
first one after the send), their locks held, until round 2's go (handshake.hold_after_first_lock).  No
statement is running meanwhile, so no statement time limit cuts the hold short.
"""

import runpy
import sys
import time

from shared import probe_report
from shared.handshake import error_of, hold_after_first_lock, serve


def after_send():
    """True once this process has handed a message to the broker (Celery.send_task: apply_async and delay too)."""
    from celery import Celery
    real = Celery.send_task
    sent = []

    def send_task(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        sent.append(True)
        return result

    Celery.send_task = send_task
    return lambda: bool(sent)


def run_once(folder: str, name: str, call, armed=lambda: True) -> None:
    def once(plan: dict) -> dict:
        if plan.get("hold"):
            hold_after_first_lock(folder, name, armed)
        try:
            return {"value": call()}
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            return error_of(exc)
    serve(folder, name, once)


def scan(folder: str, name: str) -> None:
    from recovery import recover_batch  # an import error ends the process before it says ready
    run_once(folder, name, recover_batch)


def publish(folder: str, name: str) -> None:
    from publisher import publish_one
    run_once(folder, name, publish_one, after_send())


def fast_forward() -> None:
    import state_store

    from shared.lesson_db import move_back
    created, skipped = [], [0.0]
    real_submit, real_sleep = state_store.submit_snapshot, time.sleep

    def submit_snapshot(*args, **kwargs):
        job_id = real_submit(*args, **kwargs)
        created.append(str(job_id))
        return job_id

    def sleep(seconds):
        # The time passes for the jobs this script made, at once: their next_attempt_at moves back by it.
        if created and seconds >= 0.05:
            move_back("export_jobs", "id", created, seconds, "next_attempt_at")
            skipped[0] += seconds
            real_sleep(0.005)
        else:
            real_sleep(seconds)

    state_store.submit_snapshot = submit_snapshot
    time.sleep = sleep
    try:
        runpy.run_path("verify_retry_gate.py", run_name="__main__")
    finally:
        probe_report.write({"jobs": created, "seconds": round(skipped[0], 2)})


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"fast-forward": fast_forward, "scan": scan, "publish": publish}[command](*args)
