"""Kit helper process for check 14.8 (not a lesson file): one racer calling the learner's schedule_once.

    python lab14_racer.py FOLDER NAME SLOT_KEY PRODUCT_ID

It imports schedule_store, says it is ready and waits for the checker's go (shared/handshake.py), calls
schedule_once(SLOT_KEY, [PRODUCT_ID]) once and writes {"job": <job_id or None>} or {"error": "…"}.
The checker starts four of them and lets them go together while it holds the admission gate.
"""

import sys

from shared.handshake import HELPER_LIFETIME, ready, wait_go, write_result


def wait_while_the_kit_holds(state_store) -> None:
    """In this helper process only: the learner's sessions wait as long as the checker holds the gate.

    The lesson bounds every wait (a 3 s statement limit, a 3 s socket read, a 1 s lock wait) — right for
    a service.  Here the checker holds the gate on purpose until it has seen all four racers waiting at
    it, and on a busy machine that can take longer than those limits: a timeout must not decide the
    check.  The checker's bounded wait (and the helper's lifetime) bound it instead.  The learner's
    statements run unchanged; a folder without state_store.connect keeps its own limits.
    """
    learner_connect = getattr(state_store, "connect", None)
    if not callable(learner_connect):
        return

    def connect(*args, **kwargs):
        conn = learner_connect(*args, **kwargs)
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = %s", (int(HELPER_LIFETIME),))
            if "mariadb" in conn.get_server_info().lower():
                cur.execute("SET SESSION max_statement_time = 0")
            else:
                cur.execute("SET SESSION max_execution_time = 0")
        conn._read_timeout = None  # PyMySQL applies it to every read; the helper's lifetime bounds us
        return conn

    state_store.connect = connect


def main(folder: str, name: str, slot_key: str, product: str) -> None:
    import schedule_store
    import state_store
    wait_while_the_kit_holds(state_store)
    ready(folder, name)
    if wait_go(folder, name) is None:
        return
    try:
        out = {"job": schedule_store.schedule_once(slot_key, [int(product)])}
    except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
        out = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    write_result(folder, name, out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
