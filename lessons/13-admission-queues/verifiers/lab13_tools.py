"""Kit helper processes for lesson 13's checks (not a lesson file).  Each runs the learner's code.

    python lab13_tools.py produce FOLDER NAME      a producer: submit_snapshot in rounds, each started by the
                                                   checker's go (shared/handshake.py); the plan says how often
    python lab13_tools.py claim FOLDER NAME JOB    a claimer: claim(JOB) once per round, on the checker's go
    python lab13_tools.py publish FOLDER           a publisher loop: publish_one() until FOLDER/stop exists
    python lab13_tools.py admit                    admit_export(cur) inside transaction(), the way a schedule
                                                   or a replay calls it; prints {"ok": "admitted"} or {"capacity": …}
    python lab13_tools.py limit                    the default of admit_export's limit parameter in this environment

Every loop is bounded (no file, no work: the process ends by itself).
"""

import json
import os
import sys
import time

from shared import handshake
from shared.learner_limits import wait_while_the_kit_holds

# Server errors that end a wait by time, not by what the statement found: a lock wait (1205), a statement
# limit (MySQL 3024, MariaDB 1969), a socket read that timed out (2013).
WAIT_TIMEOUTS = (1205, 3024, 1969, 2013)


def error_of(exc: Exception) -> dict:
    """handshake.error_of, with the server's error number (or None) as "code"."""
    return {**handshake.error_of(exc), "code": exc.args[0] if exc.args and isinstance(exc.args[0], int) else None}


def outcome(fn) -> dict:
    import state_store
    try:
        return {"ok": str(fn())}
    except state_store.CapacityExceeded as exc:
        return {"capacity": str(exc)[:200]}
    except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
        return error_of(exc)


def produce(folder: str, name: str) -> None:
    import state_store
    wait_while_the_kit_holds(state_store)

    def act(plan: dict) -> list[dict]:
        return [outcome(lambda: state_store.submit_snapshot(list(plan["ids"]))) for _ in range(plan["n"])]

    handshake.serve(folder, name, act, rounds=None)


def claim(folder: str, name: str, job_id: str) -> None:
    import state_store
    wait_while_the_kit_holds(state_store)

    def act(plan: dict) -> dict:
        try:
            job = state_store.claim(job_id)
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            return error_of(exc)
        if job is None:
            return {"none": True}
        if not isinstance(job, dict):
            return {"other": repr(job)[:200]}
        return {"job": {key: str(job.get(key)) for key in ("id", "lease_token", "attempts")}}

    handshake.serve(folder, name, act, rounds=None)


def publish(folder: str) -> None:
    from publisher import publish_one
    sent = 0
    give_up = time.monotonic() + 3 * handshake.HELPER_LIFETIME  # the checker stops it; this only bounds an orphan
    print("publisher loop running", flush=True)
    while time.monotonic() < give_up and not os.path.exists(os.path.join(folder, "stop")):
        try:
            busy = publish_one()
        except Exception as exc:  # noqa: BLE001 - shown in the log, the loop goes on
            print(f"publish failed: {type(exc).__name__}: {exc}"[:300], flush=True)
            busy = False
            time.sleep(0.2)
        if busy:
            sent += 1
        else:
            time.sleep(0.02)
    print(f"publisher loop stopped after {sent} events", flush=True)


def admit() -> None:
    import state_store

    def attempt():
        with state_store.transaction() as cur:
            state_store.admit_export(cur)
        return "admitted"
    print(json.dumps(outcome(attempt)))


def limit() -> None:
    from shared.lesson_db import limit_default
    print(json.dumps({"default": limit_default()}, default=repr))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"produce": produce, "claim": claim, "publish": publish, "admit": admit, "limit": limit}[command](*args)
