"""The races of lesson 13's checks (not a lesson file): the kit's hold on the first job INSERT, what the
server shows waiting (a user lock, a row lock, a metadata lock), the lab13_tools.py helpers that submit at
the same moment, and 13.7's claimer sent in while a kit transaction holds the job row as the confirm does.
Forced, never hoped for: the kit lets go once the server shows every helper waiting (or finished).
"""

from __future__ import annotations

import contextlib

from lab13_fixture import TOOLS, TRIGGER, add_filler, add_finished, reset

from shared import handshake
from shared.events import short
from shared.settings import redact
from shared.i18n import listed, t
from shared.lesson_db import (active_jobs, db_settings, gate_lock_name, kit_db, lock_waits, make_marks_table,
                              marked_trigger, remove_jobs, sql)
from shared.proc import WaitTimeout, wait_until

LOCK_WAIT_TIMEOUT = 1205  # both servers: a gate waiter that ran out of innodb_lock_wait_timeout
INNODB_TRX_POLL = 0.15  # INNODB_TRX is a cache the server refreshes at most every 0.1 s: poll it no faster


# ---------------------------------------------------------------- kit trigger: hold the first INSERT

MARKS = "lab13_kit_marks"
HOLD_BACKSTOP = 60  # seconds a held INSERT waits if the kit never lets go (it always does, in a finally)


@contextlib.contextmanager
def insert_hold():
    """While active, every job INSERT waits for the kit's user lock, held until release().  The trigger changes
    nothing else: it only stretches the moment between a submit's count and its insert, as a slow disk or a busy
    server would (the producers' sessions may wait that long: lab13_tools.py lifts the lesson's limits there)."""
    lock = gate_lock_name("lab13")
    make_marks_table(MARKS)
    wait_for_the_kit = f"DO GET_LOCK('{lock}', {HOLD_BACKSTOP}); DO RELEASE_LOCK('{lock}');"
    with kit_db() as holder, marked_trigger(TRIGGER, "BEFORE INSERT", "export_jobs", MARKS, "hold", wait_for_the_kit):
        holder.execute("SELECT GET_LOCK(%s, 10) AS got", (lock,))
        assert holder.fetchone()["got"] == 1, "the kit could not take its own user lock"
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                holder.execute("SELECT RELEASE_LOCK(%s)", (lock,))
                released = True

        sql(f"INSERT INTO {MARKS} (kind, ref) VALUES ('hold', 'every-insert')")
        try:
            yield release
        finally:
            with contextlib.suppress(Exception):  # closing the holder's connection frees the lock anyway
                release()


def waiting_sessions() -> dict:
    """Sessions of this schema inside a statement right now, by what holds them: the kit's user lock
    (a held INSERT), a lock they wait for (with the gate: its SELECT … FOR UPDATE, in LOCK WAIT; or a
    table's metadata lock), or nothing yet (still running).  Poll no faster than INNODB_TRX_POLL."""
    rows = sql("SELECT p.STATE AS state, LEFT(p.INFO, 200) AS info, t.trx_state AS trx "
               "FROM information_schema.PROCESSLIST p "
               "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
               "WHERE p.DB=%s AND p.ID<>CONNECTION_ID() AND p.COMMAND='Query'", (db_settings()["database"],))
    insert = [r for r in rows if "user lock" in (r["state"] or "").lower()]
    waiting = [r for r in rows if r not in insert
               and (r["trx"] == "LOCK WAIT" or "metadata lock" in (r["state"] or "").lower())]
    return {"insert": len(insert), "waiting": len(waiting), "running": len(rows) - len(insert) - len(waiting),
            "statements": sorted({" ".join(str(r["info"] or "").split())[:70] for r in waiting})}


# ---------------------------------------------------------------- producer processes (the learner's submit_snapshot)

def classify(results: list[dict]) -> dict:
    out = {"ok": [], "capacity": 0, "lock_wait": 0, "errors": []}
    for r in results:
        if "ok" in r:
            out["ok"].append(r["ok"])
        elif "capacity" in r:
            out["capacity"] += 1
        elif r.get("code") == LOCK_WAIT_TIMEOUT:
            out["lock_wait"] += 1
        else:
            out["errors"].append(redact(r.get("error", "?")))
    return out


class Helpers(handshake.HelperGroup):
    """lab13_tools.py processes (`produce`: the producers; `claim JOB`: 13.7's claimer), each round started by
    the checker's go_round, all at once.  Ready when made; stopped by stop() or a with block."""

    def __init__(self, command: str, names: list[str], *args: str, env: dict | None = None):
        super().__init__([TOOLS, command], names, f"lab13-{command}", command, args, env,
                         failed=t("a helper process of the checker could not start: "))

    def results(self, round_no: int, seconds: float) -> list[dict]:
        try:
            wait_until(lambda: self.done(round_no) == len(self.names), seconds, "the producers' results", interval=0.01)
        except WaitTimeout:
            raise AssertionError(t("only {done}/{n_names} producers finished their submits within {seconds:g}s",
                                   done=self.done(round_no), n_names=len(self.names), seconds=seconds)) from None
        return [result for name in self.names for result in handshake.wait_result(self.folder, name, 1, round_no)]


def race_now(c, producers: Helpers, n: int, ids: list[int]) -> dict:
    """Every producer submits n times at the same moment on the rows already there; the first INSERT is held
    until the server shows every producer held in its INSERT, waiting for a lock (the gate) or done.
    Returns the outcomes (classify()), the raw `results` and what the kit saw waiting (`seen`, for took_turns)."""
    size = len(producers.names)
    with insert_hold() as release:
        round_no = producers.go_round(n=n, ids=ids)

        def all_arrived():
            now = waiting_sessions()
            done = producers.done(round_no)
            return now["insert"] >= 1 and now["insert"] + now["waiting"] + done >= size or done == size
        try:
            wait_until(all_arrived, 30, "every producer to reach the database", interval=INNODB_TRX_POLL)
        except WaitTimeout:  # a design the kit cannot see waiting (the outcomes below still decide)
            c.note(t("  (not every producer was seen waiting within 30 s; released anyway)"))
        seen = waiting_sessions()
        release()
        results = producers.results(round_no, 30)
    return {**classify(results), "results": results, "seen": seen}


def took_turns(seen: dict) -> bool:
    """What the kit saw while it held the first INSERT: one submit inside its INSERT and another waiting for
    a lock (the gate) — they took turns.  Two inside their INSERTs had both counted before either inserted."""
    return seen["insert"] == 1 and seen["waiting"] >= 1


def near_edge(c, producers: Helpers, limit: int, running: int, bare: int, free: int = 1) -> dict:
    """All but `free` places taken (`running` rows running, `bare` ones without an event; two failed jobs beside
    them hold none).  One place free: every producer submits once at the same moment, the first INSERT held
    (race_now()); three free: 4 times each, nothing held.  Returns the outcomes (and what the kit saw waiting)
    and queued+running afterwards."""
    reset()
    add_filler(limit - free, running=running, with_events=max(0, limit - free - running - bare))
    finished = add_finished(2)
    try:
        if free == 1:
            return {**race_now(c, producers, 1, [2]), "active": active_jobs()}
        return {**classify(producers.results(producers.go_round(n=4, ids=[3]), 20)), "active": active_jobs()}
    finally:
        remove_jobs(finished)


def outcome_text(o: dict) -> str:
    parts = [t("{n} admitted", n=len(o['ok'])), t("{n} CapacityExceeded", n=o['capacity'])]
    if o["lock_wait"]:
        parts.append(t("{n} lock wait timeout", n=o['lock_wait']))
    if o["errors"]:
        parts.append(t("{n} errors", n=len(o['errors'])))
    return listed(parts)


def assert_no_errors(o: dict) -> None:
    assert not o["errors"], t("a submit failed: {errors}", errors=o['errors'][0])


# ---------------------------------------------------------------- 13.7: a claim meets the confirm's lock

def claim_while_confirm_holds(c, claimer: Helpers, job: str, event_id: str) -> tuple[dict, bool]:
    """The claimer (Helpers("claim", ["C"], job)) told to go while a kit transaction holds the job's row as the
    publisher's confirm does; once the server shows it waiting (or it answered), the kit lets go.  Returns its
    answer, and whether it waited for the row (False: it answered while the row was still held)."""
    early, waiting = None, []
    with kit_db(autocommit=False) as lock:
        # What the publisher's confirm holds until it commits: its UPDATE of sent_at makes InnoDB check
        # the foreign key again, which share-locks the job's row.  The explicit share lock is that same
        # lock, taken by name so no server's foreign-key details decide whether the row is held.
        lock.execute("UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE id=%s AND sent_at IS NULL",
                     (event_id,))
        lock.execute("SELECT id FROM export_jobs WHERE id=%s LOCK IN SHARE MODE", (job,))
        c.note(t("job {job} is queued; a kit transaction updated its event's sent_at as the outbox confirm does (not "
                 "committed), so the job's row holds a share lock", job=short(job)))
        claimer.go_round()

        def seen():
            if claimer.done(1):
                return "answered"
            return lock_waits() and "waiting"
        try:
            state = wait_until(seen, 30, "claim to wait for the row or to answer", interval=INNODB_TRX_POLL)
        except WaitTimeout:
            raise AssertionError(t("within 30 s claim neither waited for the row's lock nor returned") + "\n"
                                 + redact(claimer.procs["C"].log_tail(6))) from None
        if state == "answered":  # while the kit still holds the row
            early = handshake.wait_result(claimer.folder, "C", 5, 1)
        else:
            waiting = lock_waits()
        lock.connection.rollback()  # the kit lets go; its confirm never happened (the event stays unsent)
    if early is not None:
        return early, False
    shown = waiting[0].replace(job, short(job)) if waiting else "?"
    c.note(t("claim(job_id) in another process waits for the row's lock (the server shows LOCK WAIT: {shown})",
             shown=shown[:90]))
    result = handshake.wait_result(claimer.folder, "C", 30, 1)
    c.note(t("the kit let go → claim returned {describe_claim}", describe_claim=describe_claim(result)))
    return result, True


def claim_once_more(c, claimer: Helpers) -> dict:
    """The claimer's wait was ended by its own time limit: claim called again (round 2), the row now free."""
    result = handshake.wait_result(claimer.folder, "C", 30, claimer.go_round())
    c.note(t("(its own time limit ended the wait) the row free, called once more → {describe_claim}",
             describe_claim=describe_claim(result)))
    return result


def describe_claim(result: dict) -> str:
    if "job" in result:
        return t("the job {id} (attempts={attempts})", id=short(result['job']['id']),
                 attempts=result['job']['attempts'])
    if result.get("none"):
        return "None"
    if "error" in result:
        return redact(result["error"])[:200]
    return str(result.get("other"))[:200]
