"""Verifier for lesson 12: the transactional outbox — job and event in one commit, publish after it.

12.1  submit_snapshot([5]) returns with a queued job (attempts 0) and exactly one unsent, unclaimed
      outbox event of its own id; python submit_db_export.py, run with the broker pointed at a closed
      port (a submitter that still sends fails), prints "ready for publisher: <id>" and leaves the same
      state; python publisher.py then sends both, and the worker receives each job only as its outbox
      event (task id == event id)
12.2  Redis is stopped (shared.servicectl, by PID): a submit still records job + event; python
      publisher.py fails and sent_at stays NULL.  Redis comes back; the claim is moved into the past
      (an UPDATE, never a wait); python publisher.py prints "published True" and the worker completes it
12.3  skip-confirm drill: the confirm UPDATE of one event is made to fail (a kit trigger, after the
      send), so python publisher.py sends without marking; the claim is moved into the past; python
      publisher.py sends it again.  The worker receives it twice, yet the job has attempts 1 and the
      same single result_ref it had after the first delivery
12.4  1,000 pending events.  Publisher process A (lab12_claimer.py) claims the oldest one and stops
      right after its first locking statement, its transaction open (it says so in a file, and waits for
      the checker's word).  Publisher process B, released now, must return a different event while A still
      holds every lock it took — not an error, not "nothing due"; a B that needed A's locks could not return
      at all.  The rows A holds are counted (a SKIP LOCKED read by the checker) and A's claim is EXPLAINed,
      so a B that got nothing is told which index made A lock them all and what to write instead.  Then
      two processes claim 25 events each at the same time: 50 different events, attempts 1 each
12.5  exercise: the outbox INSERT is made to fail (a kit trigger): submit_snapshot raises and neither
      export_jobs nor export_outbox has a new row
12.6  extension: publish_one() whose claim another publisher takes over while it sends (the kit claims the
      event anew right after the learner's claim_event returned it) confirms nothing: it returns False
      and sent_at stays NULL for the new claim's holder

The kit reads the database through its own connections and never prints credentials.  12.2 stops
the box's own Redis (without a box, LAB_BOX=off, it would be the kit's: hence `"exclusive_services":
true` in tasks.json).  The triggers live only while their check runs and are dropped in `finally`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from uuid import uuid4

from shared import handshake, lesson_db
from shared.logs import LOG_DIR
from shared.events import job_events, read_events, short
from shared.scripts import run_script
from shared.i18n import t
from shared.lesson_db import (TERMINAL, UUID_RE, changed_rows, fault_trigger, held_by_others, index_columns,
                              job_event_counts, job_row, kit_db, lock_waits, one_line, outbox_of, parked, plan_of,
                              remove_jobs, sql, wait_status)
from shared.probe import Probe
from shared.proc import WaitTimeout, free_port, wait_until
from shared.tap import Check, run

EVENTS = LOG_DIR / "lab12-events.jsonl"


# ---------------------------------------------------------------- the kit's own view of the database

def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  Each needs the box's Redis and MariaDB, the lesson's worker,
    and the probe with state_store.py (and publisher.py) loaded."""
    return [
        Check("12.1", check_submit, "probe: state_store, publisher; python submit_db_export.py, publisher.py"),
        Check("12.2", check_broker_down, "probe: state_store; Redis stopped and started; python publisher.py"),
        Check("12.3", check_skip_confirm, "probe: state_store; lab12_worker in the worker; python publisher.py"),
        Check("12.4", check_skip_locked, "probe: publisher; two lab12_claimer.py processes"),
        Check("12.5", check_rollback, "probe: state_store; a kit trigger on export_outbox"),
        Check("12.6", check_stale_confirm, "probe: state_store, publisher with its claim taken over"),
    ]


def one_event(job_id: str) -> dict:
    rows = outbox_of(job_id)
    assert len(rows) == 1, t("job {job_id} should have exactly 1 outbox event, found {n_rows}", job_id=short(job_id),
                             n_rows=len(rows))
    return rows[0]


def expire_claims(job_id: str) -> int:
    """The claim runs out now: moved into the past by an UPDATE, never waited for."""
    return changed_rows("UPDATE export_outbox SET claim_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) "
                        "WHERE job_id=%s AND sent_at IS NULL AND claim_until IS NOT NULL", (job_id,))


# Kit triggers (faults) fire only for the rows marked in this kit-owned table (shared.lesson_db.fault_trigger).
MARKS = "lab12_kit_marks"


# ---------------------------------------------------------------- the learner's modules

learner = Probe()  # the learner's modules load there, never in this process (the judge)


def store():
    return learner.module("state_store", "transaction", "submit_snapshot", "claim", "finish")


def publish_until_sent(c, event_id: str, runs: int = 4) -> str:
    return lesson_db.publish_until_sent(c, event_id, t("python publisher.py failed while Redis is up (output below)"),
                                        runs)


# ---------------------------------------------------------------- the worker's deliveries (probe events)

def deliveries(job_id: str) -> list[dict]:
    return job_events(EVENTS, job_id, task="products.export")


def ended(job_id: str, task_id: str | None = None) -> list[dict]:
    ends = read_events(EVENTS, kind="end", task="products.export")
    ids = {d["task_id"] for d in deliveries(job_id)}  # read after the ends: each end's start is written by then
    return [e for e in ends if e.get("task_id") in ids and (task_id is None or e.get("task_id") == task_id)]


def wait_deliveries(job_id: str, n: int, seconds: float) -> list[dict]:
    try:
        wait_until(lambda: len(ended(job_id)) >= n, seconds, f"{n} deliveries of {job_id}", interval=0.05)
    except WaitTimeout:
        raise AssertionError(t("within {seconds:g}s the worker finished {n_ended} deliveries for job {job_id} "
                               "(expected {n}); see the worker log", seconds=seconds, n_ended=len(ended(job_id)), n=n,
                               job_id=short(job_id))) from None
    return ended(job_id)


# ---------------------------------------------------------------- Redis, stopped and started through servicectl

def redis_up() -> bool:
    from shared import servicectl
    return servicectl.redis_ok(servicectl.ensure_credentials(), timeout=0.5)


def stop_redis() -> str:
    from shared import servicectl
    how = servicectl.stop_for_drill("redis")
    wait_until(lambda: not redis_up(), 15, "Redis to stop answering", interval=0.1)
    return how


def start_redis() -> None:
    from shared import servicectl
    servicectl.up(["redis"])
    wait_until(redis_up, 30, "Redis to answer again", interval=0.1)


# ---------------------------------------------------------------- 12.1

def check_submit(c) -> None:
    state_store = store()
    learner.module("publisher", "claim_event", "publish_one")
    jobs_before, events_before = job_event_counts()
    job_id = state_store.submit_snapshot([5])
    job = job_row(job_id)
    assert job is not None, t("no job row after submit_snapshot returned")
    assert job["status"] == "queued" and job["attempts"] == 0, t(
        "a new job should be queued/0, got {status}/{attempts}", status=job['status'], attempts=job['attempts'])
    event = one_event(job_id)
    assert event["sent_at"] is None and event["claim_token"] is None, t(
        "the new event must be unsent and unclaimed (sent_at and claim_token NULL)")
    assert event["id"] != job_id, t("the event id must differ from the job id")
    assert job_event_counts() == (jobs_before + 1, events_before + 1), t("a submit must add exactly 1 job and 1 event")
    c.note(t("submit_snapshot([5]) → job {job_id} queued, event {id} sent_at=NULL", job_id=short(job_id),
             id=short(event['id'])))

    # The script runs with the broker pointed at a closed port: a submitter that writes MySQL only does not
    # notice, one that still sends a message itself fails — whichever way a worker would have raced it.
    closed = f"redis://127.0.0.1:{free_port()}/0"
    done = run_script(["submit_db_export.py"], 30, env={"CELERY_BROKER_URL": closed})
    found = re.findall(rf"ready for publisher:\s*({UUID_RE})", done.output)
    if done.code != 0 or not found:
        done.tail(c, 4)
    assert done.code == 0, t("python submit_db_export.py failed (see the output below). The checker runs it "
                                   "with CELERY_BROKER_URL pointing at a closed port: a submitter that only writes "
                                   "MySQL does not notice; failing means it still sends a message itself "
                                   "(delay/send_task), and only the publisher may send")
    assert found, t("submit_db_export.py did not print ready for publisher: <job_id>")
    script_job = found[-1]
    script_event = one_event(script_job)
    assert script_event["sent_at"] is None, t("submit_db_export.py's event is already marked sent")
    c.note(t("python submit_db_export.py (broker pointed at a closed port) → ready for publisher: {script_job} "
             "(event unsent)", script_job=short(script_job)))

    published = [publish_until_sent(c, ev) for ev in (event["id"], script_event["id"])]
    for jid, ev in ((job_id, event["id"]), (script_job, script_event["id"])):
        row = wait_status(jid, TERMINAL, 25)
        assert row["status"] == "succeeded", t("job {jid} ended {status}", jid=short(jid), status=row['status'])
        wait_until(lambda: ended(jid, ev), 15, f"the event delivery of {jid} to end", interval=0.05)
        others = sorted({d["task_id"] for d in deliveries(jid)} - {ev})
        assert not others, t("the worker got another message for job {jid} (task id {others}, not its outbox event): "
                             "the submitter must no longer call delay itself", jid=short(jid), others=short(others[0]))
    c.note(t("python publisher.py → {published}; both jobs arrived only as their outbox event (task id = event id) "
             "and succeeded", published=published[-1]))


# ---------------------------------------------------------------- 12.2

def check_broker_down(c) -> None:
    state_store = store()
    how = stop_redis()
    c.note(t("Redis stopped ({how}); PING gets no answer", how=how))
    try:
        job_id = state_store.submit_snapshot([6])
        job, event = job_row(job_id), one_event(job_id)
        assert job and job["status"] == "queued" and event["sent_at"] is None, t(
            "with Redis stopped a submit must still record a queued job and an unsent event")
        c.note(t("submit_snapshot([6]) → job {job_id} queued + event {id}, committed", job_id=short(job_id),
                 id=short(event['id'])))
        started = time.monotonic()
        # a publisher without a fail-fast setting retries for ~6 s, or ~20 s with results on
        code, output, lines = run_script(["publisher.py"], 40)
        took = time.monotonic() - started
        after = one_event(job_id)
        c.note(t("python publisher.py (Redis down) → exit code {code} in {took:.1f}s: {tail}", code=code, took=took,
                 tail=lines[-1][:200] if lines else ''))
        assert after["sent_at"] is None, t("the event was marked sent although the broker was down: write sent_at "
                                           "only after send_task returned")
        assert code != 0 or "published True" not in output, t(
            "the publisher reported success while the broker was down")
        c.note(t("sent_at still NULL, attempts={attempts}", attempts=after['attempts']))
    finally:
        start_redis()
    back = time.monotonic()
    c.note(t("Redis is back"))
    moved = expire_claims(job_id)
    if moved:
        c.note(t("the claim was moved into the past with an UPDATE (no 30 s wait)"))
    line = publish_until_sent(c, event["id"])
    c.note(f"python publisher.py → {line}")
    row = wait_status(job_id, TERMINAL, 40)
    assert row["status"] == "succeeded", t("the job ended {status}", status=row['status'])
    c.note(t("the worker reconnected: the job succeeded {monotonic:.1f}s after Redis came back",
             monotonic=time.monotonic() - back))


# ---------------------------------------------------------------- 12.3

def check_skip_confirm(c) -> None:
    state_store = store()
    job_id = state_store.submit_snapshot([9])
    event = one_event(job_id)
    # The confirm (sent_at NULL -> a time) of this one event fails, as if the publisher died right after the send.
    with fault_trigger("lab12_kit_no_confirm", "BEFORE UPDATE", "export_outbox", MARKS, "no-confirm", event["id"],
                       "lab12 drill: the publisher stopped before confirming",
                       when="OLD.sent_at IS NULL AND NEW.sent_at IS NOT NULL", ref_of="OLD.id"):
        code = run_script(["publisher.py"], 25).code
    first = one_event(job_id)
    c.note(t("run 1 of python publisher.py (confirm skipped) → exit code {code}; sent_at={sent_at}, "
             "attempts={attempts}", code=code, sent_at=first['sent_at'], attempts=first['attempts']))
    assert first["sent_at"] is None, t("after the failed confirm sent_at must stay NULL")
    try:
        wait_deliveries(job_id, 1, 15)
    except AssertionError:
        c.note(t("run 1 delivered nothing: is the confirm written before the send?"))
        raise
    row = wait_status(job_id, TERMINAL, 20)
    assert row["status"] == "succeeded" and row["result_ref"], t(
        "after the first delivery the job should have succeeded with a result_ref, got {status}", status=row['status'])
    first_ref = row["result_ref"]
    c.note(t("delivery 1: the job succeeded, result_ref={name}", name=Path(first_ref).name[:40]))

    assert expire_claims(job_id) == 1, t("the event should still hold run 1's claim (claim_until set)")
    c.note(t("claim moved into the past, then python publisher.py again"))
    line = publish_until_sent(c, event["id"], runs=1)
    second = one_event(job_id)
    assert second["attempts"] >= 2, t("attempts should grow with the repeat, got {attempts}",
                                      attempts=second['attempts'])
    seen = wait_deliveries(job_id, 2, 25)
    row = job_row(job_id)
    c.note(t("run 2: {line}, outbox attempts={attempts}; the worker received it {n_seen} times (same task id: "
             "{value})", line=line, attempts=second['attempts'], n_seen=len(seen),
             value=len({e['task_id'] for e in seen}) == 1))
    assert row["status"] == "succeeded" and row["result_ref"] == first_ref and row["attempts"] == 1, t(
        "the repeat changed the result: status={status}, attempts={attempts}, result_ref changed={value}; the "
        "consumer must keep lesson 11's claim/finish conditions", status=row['status'], attempts=row['attempts'],
        value=row['result_ref'] != first_ref)
    c.note(t("result unchanged: attempts=1, exactly one result_ref"))


# ---------------------------------------------------------------- 12.4: what a claim locks, and why

COURSE_INDEX = ["sent_at", "available_at", "created_at"]  # schema_outbox.sql as the course text gives it
FIXED_INDEX = "KEY export_outbox_pending (sent_at, created_at, id)"


def all_locked_message(plan: dict, locked: int, pending: int) -> str:
    """Why B got nothing, in one read: the rows A locked, the plan that made it lock them, the fix."""
    seen = t("publisher B got nothing: while A sat inside its claim transaction it held {locked} of the {pending} "
             "pending events locked. ", locked=locked, pending=pending)
    if not plan["filesort"]:
        return seen + t("EXPLAIN of A's SELECT … FOR UPDATE SKIP LOCKED: {line}. A claim must lock only the row it "
                        "returns: give export_outbox an index matching the WHERE and ORDER BY, such as (sent_at, "
                        "created_at, id)", line=plan['line'])
    indexes = index_columns("export_outbox")
    course = next((name for name, cols in indexes.items() if cols == COURSE_INDEX), None)
    course_text = f"{course} ({', '.join(COURSE_INDEX)})" if course else ""
    if plan["key"]:
        how = t("It reads through {index}{value}", index=plan['index'],
                value=t(' — the index the course text gives') if plan['key'] == course else '')
    elif course:
        how = t("It reads the whole table; the table's {course_text}, the index the course text gives, cannot "
                "return that order, so the server does not even use it", course_text=course_text)
    else:
        how = t("It reads the whole table")
    drop = plan["key"] or ("export_outbox_pending" if "export_outbox_pending" in indexes else None)
    alter = f"ALTER TABLE export_outbox {f'DROP INDEX {drop}, ' if drop else ''}ADD {FIXED_INDEX};"
    return seen + t("{value}EXPLAIN of A's SELECT … FOR UPDATE SKIP LOCKED: {line}. {how}. Using filesort: no index "
                    "returns rows in the order of ORDER BY created_at, id, so the server reads and sorts every "
                    "pending row before LIMIT 1, and FOR UPDATE locks every row it read. Fix: in schema_outbox.sql "
                    "write {fixed_index} (sent_at's equality first, then exactly the ORDER BY); on the table you "
                    "already have run {alter} (this lesson's guide: 'Does SKIP LOCKED really skip?')", how=how,
                    value=t("The cause is the course's index, not your typing. ") if course
                    else t('The cause is the index. '),
                    line=plan['line'], fixed_index=FIXED_INDEX, alter=alter)


def add_pending(n: int) -> tuple[list[str], list[str]]:
    """n jobs with one due outbox event each, created an hour ago in a known order (the kit's own rows)."""
    jobs = [str(uuid4()) for _ in range(n)]
    events_ = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        cur.executemany("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                        "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(j,) for j in jobs])
        cur.executemany("INSERT INTO export_outbox (id, job_id, created_at, available_at) VALUES "
                        "(%s, %s, DATE_ADD(DATE_SUB(NOW(6), INTERVAL 1 HOUR), INTERVAL %s MICROSECOND), "
                        "DATE_SUB(NOW(6), INTERVAL 1 HOUR))",
                        [(e, j, k) for k, (e, j) in enumerate(zip(events_, jobs, strict=True))])
    return jobs, events_


def check_skip_locked(c) -> None:
    store()
    learner.module("publisher", "claim_event")
    with parked(set()):  # earlier checks' events that were never sent would be claimed first
        claims_never_block(c)


def claims_never_block(c) -> None:
    jobs, ids = add_pending(1000)
    oldest = ids[0]
    try:
        # lab12_claimer.py processes, each running the learner's claim_event when the checker says go.
        claimers = handshake.HelperGroup(["lab12_claimer.py"], ["A", "B"], "lab12-claimers", "publisher")
        try:
            # A stops inside its claim right after its first locking statement, its transaction open.
            claimers.go("A", {"hold": True})
            wait_until(lambda: claimers.held("A") or claimers.finished("A") or claimers.dead(), 30,
                       "publisher A to lock its event", interval=0.01)
            held = claimers.held("A")
            assert held, t("publisher A's claim_event finished without a statement that takes a row lock (SELECT … "
                           "FOR UPDATE SKIP LOCKED): two publishers would claim one event")
            c.note(t("1,000 pending events; publisher A held inside its claim transaction, right after: {statement}",
                     statement=one_line(held['statement'])))
            # B runs while A holds every lock it took: if B needed any of them it could not return now.
            claimers.go("B", {})
            got_b = claimers.result("B", 20)
            locked = held_by_others("export_outbox", ids)
            plan = plan_of(held["statement"], "export_outbox")  # same rows, same moment as A's own read
            waits = lock_waits() if got_b is None else []
            claimers.release("A")
            got_a = claimers.result("A", 20)
        finally:
            claimers.stop()
        c.note(t("EXPLAIN of A's claim: {line}", line=plan['line']))
        c.note(t("while A holds its claim: {locked} of the {n_ids} pending events are locked by A (a SKIP LOCKED "
                 "read by the checker gets the other {n_ids2})", locked=locked, n_ids=len(ids),
                 n_ids2=len(ids) - locked))
        assert got_a and got_a[0].get("event") == oldest, t(
            "publisher A should claim the oldest event, got {got_a}", got_a=got_a)
        assert got_b is not None, t(
            "publisher B did not return while A held its claim transaction: it is waiting for A's lock (innodb_trx: "
            "{wait}). Use FOR UPDATE SKIP LOCKED", wait=waits[0]) if waits else t(
            "publisher B did not return while A held its claim transaction: it is waiting for A's lock. Use FOR "
            "UPDATE SKIP LOCKED")
        b = got_b[0]
        c.note(t("with A still holding its locks, B → {event}", event=b.get('event') or b.get('error')))
        assert not b.get("error"), t("publisher B failed: {error} (waiting for A's lock? use SKIP LOCKED)",
                                     error=b['error'])
        assert b.get("event"), all_locked_message(plan, locked, len(ids))
        assert b["event"] != oldest, t("B claimed the event A is holding")
        # What the helpers said, seen in the table by the checker itself: A held a lock, and both events carry
        # a claim of their own (each helper's word alone could name any two ids).
        tokens = {r["id"]: r["claim_token"] for r in sql("SELECT id, claim_token FROM export_outbox WHERE id IN "
                                                        "(%s, %s)", [oldest, b["event"]])}
        mine = [tokens.get(oldest), tokens.get(b["event"])]
        assert locked >= 1 and all(mine) and mine[0] != mine[1], t(
            "the table does not show what the publishers reported: while A held its claim the checker found "
            "{locked} event(s) locked, and the claim tokens of A's and B's events are {tokens}; claim_event must "
            "lock the row, write its own claim_token and return that row", locked=locked,
            tokens=[short(tk) if tk else None for tk in mine])
        c.note(t("A → the oldest event {oldest}; B → {event} (different, returned while A's transaction was still "
                 "open)", oldest=short(oldest), event=short(b['event'])))

        burst = handshake.HelperGroup(["lab12_claimer.py"], ["P", "Q"], "lab12-claimers", "publisher")
        try:
            burst.go("P", {"rounds": 25})
            burst.go("Q", {"rounds": 25})
            got = {name: burst.result(name, 60) for name in ("P", "Q")}
        finally:
            burst.stop()
        for name, result in got.items():
            assert result is not None, t("publisher {name} did not finish 25 claims within 60 s", name=name)
            errors = [r["error"] for r in result if r.get("error")]
            assert not errors, t("publisher {name} failed: {errors}", name=name, errors=errors[0])
            assert all(r.get("event") for r in result), t("publisher {name} once got nothing (900+ still pending)",
                                                          name=name)
        p, q = [r["event"] for r in got["P"]], [r["event"] for r in got["Q"]]
        both = set(p) & set(q)
        assert not both, t("two publishers claimed the same event {next} in one claim window",
                           next=short(next(iter(both))))
        assert len(set(p) | set(q)) == 50, t("50 claims must give 50 different events")
        marks = ",".join(["%s"] * 50)
        rows = sql(f"SELECT attempts, claim_token FROM export_outbox WHERE id IN ({marks})", p + q)
        assert len(rows) == 50, t("{missing} of the 50 events the publishers reported are not in export_outbox: "
                                  "claim_event must return the row it claimed", missing=50 - len(rows))
        assert all(r["attempts"] == 1 and r["claim_token"] for r in rows), t(
            "each claimed event must have a token and attempts=1")
        c.note(t("two publishers claiming 25 each at once: 50 different events, attempts 1 each"))
    finally:
        remove_jobs(jobs, tables=("export_outbox",))


# ---------------------------------------------------------------- 12.5

def check_rollback(c) -> None:
    state_store = store()
    before = job_event_counts()
    raised = None
    with fault_trigger("lab12_kit_fail_outbox", "BEFORE INSERT", "export_outbox", MARKS, "fail-outbox", "all",
                       "lab12 drill: the outbox insert fails"):
        try:
            state_store.submit_snapshot([11])
        except Exception as exc:  # noqa: BLE001 - any exception is what the drill expects
            raised = exc
    after = job_event_counts()
    c.note(t("the outbox INSERT is refused by a trigger: submit_snapshot → {name}",
             name=type(raised).__name__ if raised else t('no exception')))
    assert raised is not None, t("submit_snapshot raised nothing although the outbox insert failed (swallowed?)")
    c.note(t("jobs {before} → {after}, events {before2} → {after2}", before=before[0], after=after[0], after2=after[1],
             before2=before[1]))
    assert after == before, t("the exception left a job row without its event: both INSERTs must share one "
                              "connection and transaction")
    job_id = state_store.submit_snapshot([11])
    assert len(outbox_of(job_id)) == 1, t("without the fault a submit works again")
    c.note(t("without the fault a new submit records job and event"))


# ---------------------------------------------------------------- 12.6

def check_stale_confirm(c) -> None:
    state_store = store()
    learner.module("publisher", "claim_event", "publish_one")
    with parked(set()):  # made inside the block, ours is the one event due
        job_id = state_store.submit_snapshot([12])
        # The message does go out (the worker runs the job); the event stays unsent under the new claim.
        result = learner.call("shared.learner_spies:publish_after_takeover", one_event(job_id)["id"])
    after = one_event(job_id)
    assert after["attempts"] >= 1, t("publish_one() did not claim the one event due (attempts {attempts}), so no "
                                     "claim could be taken over", attempts=after["attempts"])
    c.note(t("claim taken over by another publisher while publish_one() sent: publish_one() → {result}; "
             "sent_at={sent_at}", result=result, sent_at=after["sent_at"]))
    assert after["sent_at"] is None and result is False, t(
        "a publisher whose claim was taken over still confirmed the send (publish_one() → {result}): the new "
        "holder can no longer confirm its own. The confirm's WHERE needs claim_token=%s (and claim_until>NOW(6)), "
        "and publish_one() returns rowcount == 1", result=result)


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    EVENTS.parent.mkdir(parents=True, exist_ok=True)
    run(checks())
