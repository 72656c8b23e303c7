"""The learner's time limits, lifted in a kit helper process while the checker holds a lock on purpose.

Helper processes (lab13_tools.py, lab14_racer.py) run the learner's code against a gate row or a user
lock that the checker holds until it has seen every helper arrive.  Used there only, never in a worker
or a server the lesson runs.
"""

from shared.handshake import HELPER_LIFETIME


def wait_while_the_kit_holds(state_store) -> None:
    """In this helper process only: the learner's sessions wait as long as the checker holds its lock.

    The lesson bounds every wait (innodb_lock_wait_timeout 1 s, a 3 s statement limit, a 3 s socket
    read) — right for a service.  Here the checker holds a lock on purpose until it has seen every helper
    arrive, and on a busy machine that can take longer than those limits: a timeout must not decide the
    check.  The checker's own bounded waits (and the helper's lifetime) bound it instead.  The learner's
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
