"""Kit helper process for check 14.8 (not a lesson file): one racer calling the learner's schedule_once.

    python lab14_racer.py FOLDER NAME SLOT_KEY PRODUCT_ID

Once ready it waits for the checker's go (shared/handshake.py), calls schedule_once(SLOT_KEY, [PRODUCT_ID])
once and writes {"job": <job_id or None>} or {"error": "…"}.
"""

import sys

from shared.handshake import error_of, serve
from shared.learner_limits import wait_while_the_kit_holds


def main(folder: str, name: str, slot_key: str, product: str) -> None:
    import schedule_store
    import state_store
    wait_while_the_kit_holds(state_store)

    def once(plan: dict) -> dict:
        try:
            return {"job": schedule_store.schedule_once(slot_key, [int(product)])}
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            return error_of(exc, 200)

    serve(folder, name, once)


if __name__ == "__main__":
    main(*sys.argv[1:5])
