"""Kit helper process for check 11.2 (not a lesson file): `python lab11_claimer.py FOLDER NAME THREADS` runs
THREADS claimer threads NAME.1 … NAME.THREADS; each round (shared/handshake.py) each waits for the checker's go
(the plan names the job), calls the learner's state_store.claim(job) and writes {"token": …} or {"error": …}.

The race is the worst case by construction: a claimer whose first statement on export_jobs is a plain read
(no FOR UPDATE, no write) stops right after it, transaction open, and writes paused-NAME.k-ROUND; it goes on
only at the checker's go-release-ROUND, once every claimer has stopped or finished.  So check-then-update
without a lock always has every claimer read 'queued' before any of them writes.  A locking first statement
is never held back: it orders the claimers by itself (SKIP LOCKED skips the row; a plain FOR UPDATE waits, at
most innodb_lock_wait_timeout, for another claimer's short transaction).  Every wait is bounded
(handshake.HELPER_LIFETIME): a helper never outlives a vanished checker.
"""

import sys
import threading
from pathlib import Path

from shared.handshake import error_of, ready, takes_locks, wait_go, write_json, write_result

_claimer = threading.local()  # set only while a claimer thread is inside claim()


def pause_after_plain_read(folder: Path) -> None:
    """Wrap pymysql's Cursor.execute in this process (see above)."""
    import pymysql.cursors
    real = pymysql.cursors.Cursor.execute

    def execute(self, query, args=None):
        result = real(self, query, args)
        me = getattr(_claimer, "name", None)
        if me and not _claimer.seen:
            sent = self._executed  # the statement as sent to the server
            text = sent.decode(errors="replace") if isinstance(sent, bytes) else str(sent)
            if "export_jobs" in text:
                _claimer.seen = True
                if not takes_locks(text):
                    write_json(folder / f"paused-{me}-{_claimer.round}", {"statement": text[:300]})
                    wait_go(folder, "release", _claimer.round)
        return result

    pymysql.cursors.Cursor.execute = execute


def outcome(got) -> dict:
    if got is None:
        return {"token": None}
    if isinstance(got, dict) and got.get("lease_token"):
        return {"token": str(got["lease_token"])}
    return {"error": f"claim returned {got!r}"[:200]}


def claimer(folder: Path, name: str, state_store) -> None:
    round_no = 1
    while (plan := wait_go(folder, name, round_no)) is not None:
        _claimer.name, _claimer.round, _claimer.seen = name, round_no, False
        try:
            result = outcome(state_store.claim(plan["job"]))
        except Exception as exc:  # noqa: BLE001 - reported to the checker, which decides
            result = error_of(exc, 200)
        finally:
            _claimer.name = None
        write_result(folder, name, result, round_no)
        round_no += 1


def main(folder: str, name: str, threads: str) -> None:
    import state_store  # an import error ends the process before it says ready: the checker shows the log
    pause_after_plain_read(Path(folder))
    pool = [threading.Thread(target=claimer, args=(Path(folder), f"{name}.{k}", state_store))
            for k in range(1, int(threads) + 1)]
    for thread in pool:
        thread.start()
    ready(folder, name)  # state_store imported, every claimer thread waiting for its go
    for thread in pool:
        thread.join()


if __name__ == "__main__":
    main(*sys.argv[1:4])
