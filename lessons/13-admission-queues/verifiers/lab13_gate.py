"""The races of lesson 13's checks (not a lesson file): the kit's hold on the first job INSERT, what the
server shows waiting (a user lock, a row lock, a metadata lock), the producer processes (lab13_tools.py
produce) that submit at the same moment, each round started by the checker's go, and 13.7's claimer
(lab13_tools.py claim) sent in while a kit transaction holds the job row as the outbox confirm does.

Races are forced, never hoped for: the kit holds its lock until the server shows every helper waiting
for it (or finished), then lets go; the outcomes (admitted, CapacityExceeded, errors) decide.
"""

from __future__ import annotations

import contextlib
import sys
from uuid import uuid4

from lab13_fixture import TOOLS, TRIGGER, active_count, add_filler, comma_list, reset

from shared import handshake
from shared.lesson_celery import LOG_DIR, WORK, redact, short
from shared.i18n import t
from shared.lesson_db import db_settings, gate_lock_name, kit_db, lock_waits, make_marks_table, sql, trigger
from shared.proc import Process, WaitTimeout, wait_until

LOCK_WAIT_TIMEOUT = 1205  # both servers: a gate waiter that ran out of innodb_lock_wait_timeout
INNODB_TRX_POLL = 0.15  # INNODB_TRX is a cache the server refreshes at most every 0.1 s: poll it no faster


# ---------------------------------------------------------------- kit trigger: hold the first INSERT

MARKS = "lab13_kit_marks"
HOLD_BACKSTOP = 60  # seconds a held INSERT waits if the kit never lets go (it always does, in a finally)


@contextlib.contextmanager
def insert_hold():
    """While active, every job INSERT waits for the kit's user lock, which the kit holds until release().

    The trigger changes nothing else: it only stretches the moment between a submit's count and its
    insert, as a slow disk or a busy server would.  The producers' sessions may wait that long
    (lab13_tools.py lifts the lesson's time limits in those processes only).
    """
    lock = gate_lock_name("lab13")
    make_marks_table(MARKS)
    body = f"""CREATE TRIGGER {TRIGGER} BEFORE INSERT ON export_jobs FOR EACH ROW
               BEGIN
                 IF EXISTS (SELECT 1 FROM {MARKS} WHERE kind='hold') THEN
                   DO GET_LOCK('{lock}', {HOLD_BACKSTOP});
                   DO RELEASE_LOCK('{lock}');
                 END IF;
               END"""
    with kit_db() as holder, trigger(TRIGGER, body, MARKS):
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


def helpers_ready(folder, procs: dict[str, Process]) -> None:
    """Every helper said it is ready (shared/handshake.py), or one exited: a failed check with its log."""
    wait_until(lambda: all((folder / f"ready-{n}").exists() or not p.alive() for n, p in procs.items()),
               30, "the helper processes to start", interval=0.02)
    dead = [n for n, p in procs.items() if not p.alive()]
    assert not dead, t("a helper process of the checker could not start: {log_tail}",
                       log_tail=redact(procs[dead[0]].log_tail(4)))


def answered(folder, name: str, round_no: int) -> bool:
    return (folder / f"res-{name}-{round_no}").exists()  # shared/handshake.py's result file


class Producers:
    """Producer processes (lab13_tools.py produce), each round started by the checker's go, all at once."""

    def __init__(self, names: list[str], env: dict | None = None):
        self.names = names
        self.folder = LOG_DIR / f"lab13-producers-{uuid4().hex[:8]}"
        self.folder.mkdir(parents=True)
        self.round = 0
        self.procs = {name: Process([sys.executable, TOOLS, "produce", str(self.folder), name], cwd=WORK,
                                    log_path=self.folder / f"{name}.log", env=env) for name in names}
        try:
            helpers_ready(self.folder, self.procs)
        except BaseException:
            self.stop()
            raise

    def go(self, n: int, ids: list[int]) -> int:
        self.round += 1
        handshake.go(self.folder, self.names, {"n": n, "ids": ids}, self.round)
        return self.round

    def done(self, round_no: int) -> int:
        return sum(answered(self.folder, n, round_no) for n in self.names)

    def results(self, round_no: int, seconds: float) -> list[dict]:
        try:
            wait_until(lambda: self.done(round_no) == len(self.names), seconds, "the producers' results", interval=0.01)
        except WaitTimeout:
            raise AssertionError(t("only {done}/{n_names} producers finished their submits within {seconds:g}s",
                                   done=self.done(round_no), n_names=len(self.names), seconds=seconds)) from None
        found = []
        for name in self.names:
            found.extend(handshake.wait_result(self.folder, name, 1, round_no))
        return found

    def stop(self) -> None:
        handshake.stop(self.folder)
        for proc in self.procs.values():
            proc.stop(grace=3)


def race_now(c, producers: Producers, n: int, ids: list[int]) -> dict:
    """Every producer submits n times at the same moment on the rows already there; the first INSERT is held
    until the server shows every producer held in its INSERT, waiting for a lock (the gate) or done.
    Returns the outcomes and what the kit saw waiting (`seen`, for took_turns)."""
    size = len(producers.names)
    with insert_hold() as release:
        round_no = producers.go(n, ids)

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
        outcome = classify(producers.results(round_no, 30))
    return {**outcome, "seen": seen}


def took_turns(seen: dict) -> bool:
    """What the kit saw while it held the first INSERT: one submit inside its INSERT and another waiting for
    a lock (the gate) — they took turns.  Two inside their INSERTs had both counted before either inserted."""
    return seen["insert"] == 1 and seen["waiting"] >= 1


def race_at_edge(c, producers: Producers, limit: int, running: int, bare: int) -> dict:
    """limit-1 places taken; every producer submits once at the same moment (race_now(): the first INSERT held
    until every producer has reached the database).  Returns the outcomes, what the kit saw waiting and
    queued+running afterwards."""
    reset()
    add_filler(limit - 1, running=running, with_events=max(0, limit - 1 - running - bare))
    return {**race_now(c, producers, 1, [2]), "active": active_count()}


def combined(*outcomes: dict) -> dict:
    """Outcomes of several rounds (classify()) as one."""
    return {"ok": [ok for o in outcomes for ok in o["ok"]], "capacity": sum(o["capacity"] for o in outcomes),
            "lock_wait": sum(o["lock_wait"] for o in outcomes), "errors": [e for o in outcomes for e in o["errors"]]}


def burst_near_edge(producers: Producers, limit: int, running: int, bare: int) -> dict:
    """limit-3 places taken, nothing held: every producer submits 4 times at once.  Returns the outcomes
    and queued+running afterwards."""
    reset()
    add_filler(limit - 3, running=running, with_events=max(0, limit - 3 - running - bare))
    round_no = producers.go(4, [3])
    outcome = classify(producers.results(round_no, 20))
    return {**outcome, "active": active_count()}


def outcome_text(o: dict) -> str:
    parts = [t("{n} admitted", n=len(o['ok'])), t("{n} CapacityExceeded", n=o['capacity'])]
    if o["lock_wait"]:
        parts.append(t("{n} lock wait timeout", n=o['lock_wait']))
    if o["errors"]:
        parts.append(t("{n} errors", n=len(o['errors'])))
    return comma_list(parts)


def assert_no_errors(o: dict) -> None:
    assert not o["errors"], t("a submit failed: {errors}", errors=o['errors'][0])


# ---------------------------------------------------------------- 13.7: a claim meets the confirm's lock

def start_claimer(job: str) -> tuple:
    """The claimer (lab13_tools.py claim C): claim(job) once per round, on the checker's go.  Returns its
    handshake folder and its process; helpers_ready() tells when it can go."""
    folder = LOG_DIR / f"lab13-claimer-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    helper = Process([sys.executable, TOOLS, "claim", str(folder), "C", job], cwd=WORK, log_path=folder / "claimer.log")
    return folder, helper


def claim_while_confirm_holds(c, folder, helper: Process, job: str, event_id: str) -> tuple[dict | None, list]:
    """The claimer (lab13_tools.py claim, ready in `folder`) told to go while a kit transaction holds the job's
    row as the publisher's confirm does; once the server shows it waiting (or it answered), the kit lets go.
    Returns (its answer if it came while the row was held, else None; the LOCK WAIT statements then shown)."""
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
        handshake.go(folder, ["C"], round_no=1)

        def seen():
            if answered(folder, "C", 1):
                return "answered"
            return lock_waits() and "waiting"
        try:
            state = wait_until(seen, 30, "claim to wait for the row or to answer", interval=INNODB_TRX_POLL)
        except WaitTimeout:
            raise AssertionError(t("within 30 s claim neither waited for the row's lock nor returned") + "\n" + redact(helper.log_tail(6))) \
                from None
        if state == "answered":  # while the kit still holds the row
            early = handshake.wait_result(folder, "C", 5, 1)
        else:
            waiting = lock_waits()
        lock.connection.rollback()  # the kit lets go; its confirm never happened (the event stays unsent)
    return early, waiting


def answer_after_waiting(c, folder, job: str, waiting: list) -> dict:
    """The claimer was seen waiting for the row (`waiting`: the server's LOCK WAIT statements): its answer
    once the kit let go."""
    shown = waiting[0].replace(job, short(job)) if waiting else "?"
    c.note(t("claim(job_id) in another process waits for the row's lock (the server shows LOCK WAIT: {shown})",
             shown=shown[:90]))
    result = handshake.wait_result(folder, "C", 30, 1)
    c.note(t("the kit let go → claim returned {describe_claim}", describe_claim=describe_claim(result)))
    return result


def claim_once_more(c, folder) -> dict:
    """The claimer's wait was ended by its own time limit: claim called again (round 2), the row now free."""
    handshake.go(folder, ["C"], round_no=2)
    result = handshake.wait_result(folder, "C", 30, 2)
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
