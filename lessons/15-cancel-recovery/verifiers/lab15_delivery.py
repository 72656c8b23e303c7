"""Lesson 15's checks of the delivery side (not a lesson file): a sent but never claimed job re-dispatched
once, with two scanners at once (15.4); duplicate deliveries during the backoff (15.5); the publisher's
confirm (15.6); a worker's warm shutdown with a job in flight (15.7).  lab15_verify.py runs them; the lab
is lab15_fixture.py, the drills lab15_drills.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal

from lab15_drills import (helpers, add_overdue, all_locked_message, overdue, pending_counts,
                          time_passes)
from lab15_fixture import (GATE, celery_app, learner, make_due, outbox_row,
                           publish_event, published_as, publisher, recovery, remove_jobs, retire, run_script,
                           scan, send, shown, store, submitted, unsent, wait_end, wait_hold, worker_event)

from shared import probe_report
from shared.lesson_celery import declared_worker, private_worker_argv, start_worker
from shared.logs import LOG_DIR
from shared.events import short
from shared.proc import children_of
from shared.i18n import t
from shared.lesson_db import (TERMINAL, UUID_RE, fault_trigger, held_by_others, job_row, lease_token_of, lock_waits,
                              make_marks_table, one_line, parked, payload_of, plan_of, row_lock_error, server_now, sql,
                              wait_status)
from shared.proc import WaitTimeout, wait_until

MARKS = "lab15_kit_marks"


def said(result: dict | None):
    """A helper's result for a note: its value, or its error (None while it has not answered)."""
    return result and result.get("value", result.get("error"))


# ---------------------------------------------------------------- 15.4

def check_unclaimed(c) -> None:
    st = store()
    rec = recovery()
    jobs: list[str] = []
    crowd: list[str] = []
    try:
        code, output, lines = run_script(["verify_queued_recovery.py"])
        found = re.findall(rf"queued delivery recovery verified\s+({UUID_RE})", output)
        c.note("python verify_queued_recovery.py → " + (lines[-1] if lines else t("(no output)")))
        if code != 0 or not found:
            for line in lines[-4:-1]:
                c.note("  " + line)
        assert code == 0 and found, t("verify_queued_recovery.py did not print queued delivery recovery verified "
                                      "(see the output above)")
        jobs.append(found[-1])
        assert len(unsent(found[-1])) == 1, t("the script's job should have exactly 1 unsent event")

        lost, recent = submitted(st, jobs, [31]), submitted(st, jobs, [32])
        overdue(lost, 61)
        overdue(recent, 20)
        scan(rec)
        scan(rec)
        first = len(unsent(lost))
        # The publisher stays down: the new event is not sent, and another minute goes by.
        time_passes(lost, 61)
        scan(rec)
        scan(rec)
        row, got, control = job_row(lost), unsent(lost), unsent(recent)
        c.note(t("sent 61 s ago, never claimed: after two recover_batch() calls {first} unsent event(s); with the "
                 "publisher still down and another 61 s gone by (times moved back with UPDATEs), two more scans: "
                 "{n_got}, {status}, attempts={attempts}; control job sent 20 s ago: {n_control}", first=first,
                 n_got=len(got), status=row['status'], attempts=row['attempts'], n_control=len(control)))
        assert first == 1, t("the first scan should add exactly 1 unsent event, found {first}", first=first)
        assert len(got) == 1, t("expected exactly 1 new unsent event, found {n_got}: the scan must skip jobs that "
                                "already have an unsent event (NOT EXISTS)", n_got=len(got))
        assert row["status"] == "queued" and row["attempts"] == 0, t(
            "a re-dispatch is not an execution: expected queued/0, got {status}/{attempts}", status=row['status'],
            attempts=row['attempts'])
        assert not control, t("a job dispatched 20 s ago was re-dispatched too: wait for the 60 s unclaimed budget")

        # -- two scanners at once: the second must find other jobs, not wait and not find all locked
        crowd = add_overdue(120)
        scanners = helpers("scan", ["A", "B"])
        try:
            # A stops inside its batch right after its first locking statement, its transaction open.
            scanners.go("A", {"hold": True})
            held = scanners.wait_held("A")
            assert held, t("scanner A's recover_batch() finished without a statement that takes a row lock (SELECT … "
                           "FOR UPDATE SKIP LOCKED): two scanners would recover the same jobs")
            # B runs while A holds every lock it took: if B needed any of them it could not return now.
            scanners.go("B", {})
            got_b = scanners.result("B", 20)
            locked = held_by_others("export_jobs", crowd)
            plan = plan_of(held["statement"], "export_jobs", "j")  # same rows, same moment as A's own read
            waits = lock_waits() if got_b is None else []
            # What B did, as the table shows it while A still holds its batch (B's own count is its word).
            made_by_b = sum(1 for n in pending_counts(crowd).values() if n) if got_b is not None else 0
            scanners.release("A")
            got_a = scanners.result("A", 20)
        finally:
            scanners.stop()
        c.note(t("120 overdue jobs; scanner A held inside its batch, right after: {statement}",
                 statement=one_line(held['statement'])))
        c.note(t("EXPLAIN of A's scan: {line}", line=plan['line']))
        c.note(t("while A holds its batch: {locked} of the 120 overdue jobs are locked by A; with A still holding "
                 "them, scanner B → {shown_b}; then A → {got_a}", locked=locked, shown_b=said(got_b),
                 got_a=said(got_a)))
        assert got_b is not None, t(
            "scanner B did not return while A held its batch: it is waiting for A's locks (innodb_trx: {wait}). Use "
            "FOR UPDATE SKIP LOCKED", wait=waits[0]) if waits else t(
            "scanner B did not return while A held its batch: it is waiting for A's locks. Use FOR UPDATE SKIP LOCKED")
        assert "error" not in got_b, t("scanner B failed: {error} (waiting for A's locks? use FOR UPDATE SKIP LOCKED)",
                                       error=got_b['error'])
        assert isinstance(got_b["value"], int), t("recover_batch() should return how many jobs it changed, got "
                                                  "{value!r}", value=got_b['value'])
        assert got_b["value"] > 0, all_locked_message(held["statement"], plan, locked, len(crowd))
        assert made_by_b > 0, t("scanner B returned {value}, but while A still held its batch the checker found no "
                                "overdue job with a new event: recover_batch must insert the events and commit before "
                                "it returns", value=got_b["value"])
        assert got_a and isinstance(got_a.get("value"), int), t("scanner A failed: {got_a}", got_a=got_a)
        for _ in range(5):
            if not scan(rec):
                break
        counts = pending_counts(crowd)
        spread = sorted(set(counts.values()))
        c.note(t("scanning on until nothing is left: unsent events per job over the 120 jobs: {spread}", spread=spread))
        assert spread == [1], t("every overdue job should get exactly 1 new event, got {spread}", spread=spread)
    finally:
        retire(jobs)
        if crowd:
            remove_jobs(crowd)


# ---------------------------------------------------------------- 15.5

def check_retry_gate(c) -> None:
    st = store()
    app = celery_app()
    declared_worker()
    jobs: list[str] = []
    try:
        # The kit's own duplicates first: its finding names the mistake (the claim's backoff condition); the
        # course's script failing on the same mistake would only say that it failed.
        job_id = submitted(st, jobs, [41])
        # An hour, not the script's 10 s: the backoff must still hold however slowly the messages are handled.
        sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 1 HOUR) WHERE id=%s", (job_id,))
        ends = [wait_end(task) for task in [send(app, job_id) for _ in range(3)]]
        direct = [st.claim(job_id) for _ in range(2)]
        row = job_row(job_id)
        c.note(t("next_attempt_at an hour ahead: 3 duplicate messages through the worker → {value}; 2 claim() calls "
                 "→ {value2}; row {status}, attempts={attempts}", value=t(', ').join(shown(e) for e in ends),
                 value2=[lease_token_of(j) for j in direct], status=row['status'], attempts=row['attempts']))
        assert direct == [None, None] and row["status"] == "queued" and row["attempts"] == 0, t(
            "a duplicate claimed the job or raised attempts during the backoff: both the SELECT and the UPDATE in "
            "claim need next_attempt_at<=NOW(6)")
        make_due(job_id)
        wait_end(send(app, job_id))
        row = wait_status(job_id, TERMINAL, 15)
        c.note(t("next_attempt_at moved into the past, 1 message → {status}, attempts={attempts}",
                 status=row['status'], attempts=row['attempts']))
        assert row["status"] == "succeeded" and row["attempts"] == 1, t(
            "once due one claim should succeed with attempts 1, got {status}/{attempts}", status=row['status'],
            attempts=row['attempts'])

        # Then the course's own script, its sleeps fast-forwarded.
        report = probe_report.fresh_path(LOG_DIR, "lab15-fast-forward")
        code, output, printed = run_script(["lab15_tools.py", "fast-forward"],
                                           env={probe_report.REPORT_ENV: str(report)})
        info = probe_report.read(report) or {}
        jobs += [job for job in info.get("jobs", []) if isinstance(job, str)]
        c.note(t("python verify_retry_gate.py (sleeps fast-forwarded by {seconds} s) → {printed}",
                 seconds=info.get('seconds', 0), printed=printed[-1] if printed else t('(no output)')))
        if code != 0:
            for line in printed[-4:-1]:
                c.note("  " + line)
        assert code == 0 and any("persistent retry gate verified" in line for line in printed), t(
            "verify_retry_gate.py did not print persistent retry gate verified (see the output above)")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- 15.6

def check_confirm(c) -> None:
    st = store()
    pub = publisher()
    jobs: list[str] = []
    try:
        # -- normal publish: both times, close together
        job_id = submitted(st, jobs, [51])
        event = unsent(job_id)[0]
        before = server_now()
        result = publish_event(pub, event["id"])
        after = server_now()
        sent = outbox_row(event["id"])["sent_at"]
        row = job_row(job_id)
        c.note(t("publish_one() → {result}: sent_at={sent}, the job's last_dispatched_at={last_dispatched_at}",
                 result=result, sent=sent, last_dispatched_at=row['last_dispatched_at']))
        assert result is True, t("publish_one() should return True when confirmed, got {result!r}", result=result)
        assert row["last_dispatched_at"] is not None and before <= row["last_dispatched_at"] <= after, t(
            "the confirm did not record the job's last_dispatched_at")

        # -- lock order: job first, outbox second.  A publisher process stops right after the first statement
        # that takes a lock once its message is sent (the confirm's first lock) and holds it while the kit
        # looks which of the two rows is locked: a fact, whatever the machine's speed.
        job_id = submitted(st, jobs, [52])
        event = unsent(job_id)[0]
        with parked({event["id"]}):
            helper = helpers("publish", ["P"])
            try:
                helper.go("P", {"hold": True})
                held = helper.wait_held("P")
                job_lock = row_lock_error("export_jobs", job_id) if held else None
                outbox_lock = row_lock_error("export_outbox", event["id"]) if held else None
                helper.release("P")
                got = helper.result("P", 20)
            finally:
                helper.stop()
        shown_got = said(got)
        if held:
            c.note(t("after the send, the confirm's first locking statement: {statement}; at that point the job row "
                     "is {locked} and the outbox row {locked2}; released, publish_one() → {shown_got}",
                     statement=one_line(held['statement']), locked=t('locked') if job_lock else t('free'),
                     locked2=t('locked') if outbox_lock else t('free'), shown_got=shown_got))
        assert held, t("after the send publish_one() ran no statement that takes a lock (→ {shown_got}): the confirm "
                       "must SELECT … FROM export_jobs … FOR UPDATE first, then update the outbox and "
                       "last_dispatched_at", shown_got=shown_got)
        assert outbox_lock is None, t("the confirm locked the outbox row first — the recovery scan's order (job, "
                                      "then outbox) reversed, so the two can deadlock; lock the job first, then "
                                      "update the outbox")
        assert job_lock is not None, t("the confirm's first locking statement did not lock the job row: SELECT … "
                                       "FROM export_jobs … FOR UPDATE first, then update the outbox")
        assert got and got.get("value") is True, t("released, the confirm should succeed (publish_one() → True), got "
                                                   "{shown_got}", shown_got=shown_got)

        # -- one transaction: when the job update fails, sent_at must not stay
        make_marks_table(MARKS)
        job_id = submitted(st, jobs, [53])
        event = unsent(job_id)[0]
        no_dispatch = fault_trigger("lab15_kit_no_dispatch", "BEFORE UPDATE", "export_jobs", MARKS, "no-dispatch",
                                    job_id, "lab15 drill: the dispatch time cannot be written",
                                    when="NOT (NEW.last_dispatched_at <=> OLD.last_dispatched_at)", ref_of="OLD.id")
        with no_dispatch, parked({event["id"]}):
            try:
                result = pub.publish_one()
            except Exception as exc:  # noqa: BLE001 - a raise is the right answer here
                result = f"{type(exc).__name__}"
        after = outbox_row(event["id"])["sent_at"]
        c.note(t("the last_dispatched_at write refused by a trigger: publish_one() → {result}; sent_at={after}",
                 result=result, after=after))
        assert after is None, t("the job update failed but sent_at was committed: sent_at and last_dispatched_at "
                                "belong in one transaction")

        # -- a stale claim: another publisher has taken the event over
        job_id = submitted(st, jobs, [54])
        event = unsent(job_id)[0]
        # Our claim runs out while we send: another publisher claims the event right after the learner's
        # claim_event returned it (done in the probe, between the claim and the send: shared/learner_spies.py).
        with parked({event["id"]}):
            result = learner.call("shared.learner_spies:publish_after_takeover", event["id"])
        after = outbox_row(event["id"])["sent_at"]
        row = job_row(job_id)
        c.note(t("claim taken over by another publisher, publish_one() → {result}; sent_at={after}, "
                 "last_dispatched_at={last_dispatched_at}", result=result, after=after,
                 last_dispatched_at=row['last_dispatched_at']))
        assert result is False and after is None and row["last_dispatched_at"] is None, t(
            "a stale claim still confirmed the send and moved the dispatch time: the confirm's WHERE needs "
            "claim_token=%s, and last_dispatched_at changes only when rowcount == 1")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- 15.7

def check_warm_shutdown(c) -> None:
    st = store()
    app = celery_app()
    declared = declared_worker()
    job_id = st.submit_snapshot([45, 46])
    jobs = [job_id]
    proc = None
    try:
        snapshot = payload_of(job_row(job_id))
        proc = start_worker(private_worker_argv(declared.argv, "lab15.warm", "lab15warm@%h"), "worker-warm.log")
        GATE.hold(job_id, phase="write")
        task_id = send(app, job_id, queue="lab15.warm")
        paused = wait_hold("write", job_id)
        assert int(paused["pid"]) in children_of(proc.pid), t("the paused task is not in the kit's own worker")
        os.kill(proc.pid, signal.SIGTERM)  # once, to the main process only
        # Bounded, and generous: celery logs its shutdown kind as soon as it handles the signal.
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: "shutdown" in proc.log_text() or not proc.alive(), 30, "the worker's shutdown message")
        warm = "Warm shutdown" in proc.log_text()
        cold = "Cold shutdown" in proc.log_text()
        alive, row = proc.alive(), job_row(job_id)
        c.note(t("one TERM to worker main process {pid} while job {job_id} writes: log {value}{value2}; worker "
                 "{value3}, job {status}", pid=proc.pid, job_id=short(job_id), status=row['status'],
                 value='Warm shutdown' if warm else t('no Warm shutdown'), value2=t(', Cold shutdown') if cold else '',
                 value3=t('still running') if alive else t('exited')))
        assert warm and alive and not cold, t("one TERM must be a warm shutdown: the worker takes no new messages "
                                              "but waits for the running job; never follow with a second signal or "
                                              "KILL")
        GATE.release(job_id, phase="write")
        with contextlib.suppress(Exception):  # still running after 40 s: reported below
            proc.popen.wait(timeout=40)
        exited = not proc.alive()
        row = job_row(job_id)
        end = worker_event("end", task_id=task_id)
        c.note(t("released: job {status} (attempts={attempts}), worker {value}", status=row['status'],
                 attempts=row['attempts'],
                 value=t('exited with code ') + str(proc.popen.returncode) if exited else t('still up after 40 s')))
        assert row["status"] == "succeeded" and end is not None, t(
            "the job running during the warm shutdown did not finish ({status})", status=row['status'])
        path = published_as(row, snapshot, t("the result file is not the job's snapshot"))
        assert exited, t("the worker did not exit within 40 s after the job finished")
        c.note(t("the job finished first ({name}), then the worker exited", name=path.name))
    finally:
        GATE.release(job_id, phase="write")
        if proc is not None:
            proc.stop(grace=5)
        retire(jobs)
