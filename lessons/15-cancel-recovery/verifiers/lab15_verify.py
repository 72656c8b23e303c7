"""Verifier for lesson 15: cancellation, recovery of lost work, dead letters, replay, warm shutdown.

15.1  can_continue is True only for the live owner (a foreign token, a cancel, an expired lease and a
      passed deadline each make it False).  Through the worker: a job cancelled right after its claim
      (the probe pauses the task there) writes no file and publishes nothing; one cancelled while its
      file is written is refused by finish; a queued one cancelled before any claim is never claimed.
      The recovery scan (leases moved into the past) makes all three 'cancelled'
15.2  a job paused mid-write has its pool child SIGKILLed (the PID the probe recorded, a child of the
      worker; the worker itself stopped until recovery is judged, so the killed delivery's message comes
      back only after).  Lease live: the scan leaves it alone; lease moved into the past: queued, lease_expired,
      attempts unchanged, next_attempt_at = the scan's NOW(6) + 10 s (bracketed by the server's clock
      read before and after) and one new unsent event due then; python publisher.py sends nothing for
      it; both times moved 11 s back, it is sent, claimed with attempts == 2 and succeeds with its snapshot
15.3  a claimed job past its deadline is failed by the scan with a dead letter; python replay_job.py <id>
      prints a new id: queued, attempts 0, replay_of = old, the same payload, one unsent event; the old
      job and its dead letter are unchanged.  Replaying a job that is not failed changes nothing; with
      the admission gate full replay raises CapacityExceeded and creates nothing; the replay succeeds
15.4  python verify_queued_recovery.py prints "queued delivery recovery verified"; a job sent 61 s ago
      gets exactly one new event over three scans (attempts 0), one sent 20 s ago none.  120 overdue
      jobs: scanner A (a lab15_tools.py process) stops inside its batch right after its first locking
      statement; scanner B must recover other jobs meanwhile.  The jobs A holds are counted and A's scan
      EXPLAINed, so a B that got nothing is told what made A lock them all; in the end every job has
      one new event
15.5  next_attempt_at an hour ahead: three duplicate messages through the worker and two claim() calls
      get nothing, attempts stays 0; moved into the past, one message claims it with attempts == 1.  Then
      python verify_retry_gate.py passes, its sleeps fast-forwarded (each moves next_attempt_at back)
15.6  publishing sets sent_at and the job's last_dispatched_at inside the publish call; a publisher
      process stopped right after the first locking statement after its send has the job row locked and
      the outbox row not (job → outbox, the scan's order); a confirm whose job update fails leaves
      sent_at NULL (one transaction); a publisher whose claim was taken over confirms nothing
15.7  a worker of the kit's own (same app, a private queue) gets a job paused mid-write; one TERM to its
      main process: "Warm shutdown", the worker stays up, the job finishes, then the worker exits
15.8  exercise: three claims, each lease moved into the past and scanned: twice queued again, the third
      time failed with dead letter attempts_exhausted; no fourth claim (claim() and a message), attempts 3

Time is never waited out: lease_until, deadline_at, next_attempt_at, available_at and sent_at are moved
with UPDATEs.  Each check uses fresh jobs and retires them when done, so any check can run alone.
This file holds 15.1-15.3 and 15.8 and runs all eight; lab15_delivery.py holds 15.4-15.7, lab15_drills.py
their drills, lab15_fixture.py the lab they run in, lab15_figures.py the timelines of 15.2, 15.3 and 15.8.
"""

from __future__ import annotations

import contextlib
import re
import time
from uuid import uuid4

from lab15_delivery import check_confirm, check_retry_gate, check_unclaimed, check_warm_shutdown
from lab15_figures import dead_letter_lanes, exhausted_lanes, recovery_lanes
from lab15_fixture import (GATE, celery_app, dead_letter, expire_lease, explained,
                           files_of, learner, make_due, outbox_row, parked, publish_event,
                           published_as, publisher, recovery, remove_jobs, retire, run_published, run_script,
                           scan, send, shown, store, submitted, unsent, wait_end, wait_hold, worker_event)

from shared.lesson_celery import declared_worker
from shared.logs import LOG_DIR
from shared.events import job_events, short
from shared.proc import children_of
from shared.figures import attach
from shared.i18n import t
from shared.lesson_db import (UUID_RE, dead_letters, fill_admission, job_row, lease_token_of, move_back, payload_of,
                              request_cancel, server_now, set_ago, sql)
from shared.proc import WaitTimeout, kill_pid, stopped, wait_until
from shared.tap import Check, run


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need MariaDB, Redis, the probe and the runner's worker;
    each runs inside explained()."""
    return [
        Check("15.1", check_cancel, "worker paused by the probe; the recovery scan"),
        Check("15.2", check_lease_recovery, "worker; its pool child SIGKILLed; python publisher.py"),
        Check("15.3", check_dead_letter_replay, "the recovery scan; python replay_job.py; worker"),
        Check("15.4", check_unclaimed, "python verify_queued_recovery.py; lab15_tools.py scanners"),
        Check("15.5", check_retry_gate, "python verify_retry_gate.py; worker"),
        Check("15.6", check_confirm, "publisher processes stopped at a statement"),
        Check("15.7", check_warm_shutdown, "a worker of the kit's own, sent TERM"),
        Check("15.8", check_exhausted, "the recovery scan; worker"),
    ]


# ---------------------------------------------------------------- 15.1

def check_cancel(c) -> None:
    st = store("can_continue")
    rec = recovery()
    app = celery_app()
    declared_worker()  # the runner started it; fail early with a clear message if not
    jobs: list[str] = []
    try:
        # -- can_continue answers for the live owner only
        seen = []
        spoilers = {"live": None, "foreign token": None, "cancel requested": request_cancel,
                    "lease expired": expire_lease,
                    "deadline passed": lambda job: set_ago("export_jobs", "id", [job], 1, "deadline_at")}
        for case, spoil in spoilers.items():
            job_id = submitted(st, jobs, [3])
            token = lease_token_of(st.claim(job_id))
            assert token, t("a fresh job could not be claimed")
            if spoil:
                spoil(job_id)
            answer = st.can_continue(job_id, str(uuid4()) if case == "foreign token" else token)
            seen.append(f"{case} → {answer}")
            assert answer is (case == "live"), t("can_continue returned {answer!r} for '{case}': True only for the "
                                                 "current token of a running job inside its lease and deadline with "
                                                 "no cancel requested", answer=answer, case=case)
        c.note("can_continue: " + "; ".join(seen))

        # -- A: cancelled right after its claim, before the work boundary
        job_a = submitted(st, jobs, [4])
        changed, end_a = cancelled_at(app, "claim", job_a)
        row_a = job_row(job_a)
        written = files_of(job_a)
        c.note(t("A: cancelled after the worker's claim, before the write (UPDATE changed {changed} row) → task "
                 "returned {shown}; row {status}, {n_written} file(s)", changed=changed, shown=shown(end_a),
                 status=row_a['status'], n_written=len(written)))
        assert row_a["status"] != "succeeded" and not row_a["result_ref"], t(
            "a job cancelled after its claim still published a success")
        assert not written, t("after the cancel the worker still wrote {name}: call can_continue(job_id, token) at "
                              "the work boundary (before the write) and stop when it is False", name=written[0].name)

        # -- B: cancelled while the file is being written: finish must refuse
        job_b = submitted(st, jobs, [5])
        _, end_b = cancelled_at(app, "write", job_b)
        row_b = job_row(job_b)
        c.note(t("B: cancelled during the write → task returned {shown}; row {status}, result_ref={result_ref}",
                 shown=shown(end_b), status=row_b['status'], result_ref=row_b['result_ref']))
        assert row_b["status"] != "succeeded" and not row_b["result_ref"], t(
            "a job cancelled during its write was still published by finish: keep cancel_requested=FALSE in finish's "
            "WHERE")

        # -- C: cancelled while still queued: nobody claims it
        job_c = submitted(st, jobs, [6])
        request_cancel(job_c)
        wait_end(send(app, job_c))
        row_c = job_row(job_c)
        assert row_c["status"] == "queued" and row_c["attempts"] == 0, t(
            "a job cancelled while queued was claimed ({status}, attempts={attempts})", status=row_c['status'],
            attempts=row_c['attempts'])

        # -- the scan closes all three; the running two only once their lease has run out
        expire_lease(job_a)
        expire_lease(job_b)
        scan(rec)
        final = {name: job_row(job) for name, job in (("A", job_a), ("B", job_b), ("C", job_c))}
        c.note(t("leases moved into the past, recover_batch() → {value}",
                 value=t(', ').join((f"{n} {r['status']}/{r['error_code']}" for n, r in final.items()))))
        for name, row in final.items():
            assert row["status"] == "cancelled" and not row["result_ref"], t(
                "{name} ended {status} (expected cancelled with no result_ref): the scan must turn jobs with "
                "cancel_requested into cancelled", name=name, status=row['status'])
    finally:
        retire(jobs)


def cancelled_at(app, phase: str, job_id: str) -> tuple[int, dict]:
    """A message for the job; the worker paused at `phase` ("claim" or "write"), the job cancelled there, then
    let go.  The rows the cancel changed, and the task's end."""
    GATE.hold(job_id, phase=phase)
    task_id = send(app, job_id)
    wait_hold(phase, job_id)
    changed = request_cancel(job_id)
    GATE.release(job_id, phase=phase)
    return changed, wait_end(task_id)


# ---------------------------------------------------------------- 15.2

def check_lease_recovery(c) -> None:
    st = store()
    rec = recovery()
    pub = publisher()
    worker = declared_worker()
    job_id = st.submit_snapshot([11, 12])
    jobs = [job_id]
    tl: dict = {}  # the figure's moments (time.time())
    try:
        snapshot = payload_of(job_row(job_id))
        GATE.hold(job_id, phase="write")
        first = unsent(job_id)
        assert len(first) == 1, t("a new job should have exactly 1 unsent event")
        tl["pub1"] = time.time()
        publish_event(pub, first[0]["id"])
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: worker_event("hold", phase="write", job=job_id)
                       or worker_event("end", task_id=first[0]["id"]), 20, "the worker to start the job", interval=0.02)
        if not worker_event("hold", phase="write", job=job_id) and worker_event("end", task_id=first[0]["id"]):
            c.note(t("(the first delivery met the publisher's confirm holding the job row and was skipped; one more "
                     "message sent)"))
            send(celery_app(), job_id)
        paused = wait_hold("write", job_id)
        child = int(paused["pid"])
        assert child in children_of(worker.pid), t("the paused process {child} is not a child of the worker (pid "
                                                   "{pid})", child=child, pid=worker.pid)
        before = job_row(job_id)
        tl["attempts1"] = before and before["attempts"]
        assert before["status"] == "running" and before["attempts"] == 1, t(
            "during the write the job should be running/1, got {status}/{attempts}", status=before['status'],
            attempts=before['attempts'])
        tl["child"] = child
        tl["kill"] = time.time()
        # acks_late + reject_on_worker_lost hand the killed delivery's message out again.  The worker stays
        # stopped from before the kill until recovery has been judged, so that delivery comes during the
        # backoff or after it, never between recover_batch and the read of its row: there a claim that
        # ignores the backoff (15.5's mistake) would look like a recovery that left the job running.
        with stopped(worker.pid):  # continued, its claim of the old message finds the job in its backoff
            kill_pid(child, 10, f"pool child {child} to die")
            c.note(t("job {job_id} mid-write: worker child {child} SIGKILLed (running, attempts=1)",
                     job_id=short(job_id), child=child))
            task_id = first[0]["id"]

            tl["scan_live"] = time.time()
            scan(rec)
            live = job_row(job_id)
            c.note(t("recover_batch() with the lease still live → row {status}, token unchanged: {value}",
                     status=live['status'], value=live['lease_token'] == before['lease_token']))
            assert live["status"] == "running" and live["lease_token"] == before["lease_token"], t(
                "the scan touched a running job whose lease is still live: recover only jobs whose lease_until "
                "has passed")

            tl["expire"] = time.time()
            expire_lease(job_id)
            # The scan's NOW(6) lies between the server's clock read just before and just after it, so
            # next_attempt_at - 10 s must too, however slowly the scan ran.
            before = server_now()
            tl["scan"] = time.time()
            scan(rec)
            after = server_now()
            row = job_row(job_id)
            pending = unsent(job_id)
            since_start = (row["next_attempt_at"] - before).total_seconds()
            since_end = (row["next_attempt_at"] - after).total_seconds()
            tl["backoff"] = since_start
            c.note(t("lease moved into the past, recover_batch() → {status}, error_code={error_code}, "
                     "attempts={attempts}, next_attempt_at = {since_start:.1f}s after the scan began / "
                     "{since_end:.1f}s after it returned; {n_pending} unsent event(s)", status=row['status'],
                     error_code=row['error_code'], attempts=row['attempts'], since_start=since_start,
                     since_end=since_end, n_pending=len(pending)))
            assert row["status"] == "queued" and row["lease_token"] is None, t(
                "a job with an expired lease should be queued again without a token, got {status}",
                status=row['status'])
            assert row["attempts"] == 1, t("recovery changed attempts to {attempts}: recovery never resets or adds "
                                           "attempts", attempts=row['attempts'])
            assert since_start >= 9 and since_end <= 11, t("next_attempt_at should be 10 s after the scan, got "
                                                           "{since_start:.1f}s after the scan began",
                                                           since_start=since_start)
            assert len(pending) == 1, t("recovery should add exactly 1 unsent event, found {n_pending}",
                                        n_pending=len(pending))
            event = pending[0]
            assert event["id"] != task_id and event["available_at"] == row["next_attempt_at"], t(
                "the new event's available_at must equal the job's next_attempt_at (one backoff)")

        tl["pub_wait"] = time.time()
        with parked({event["id"]}):
            code, output, lines = run_script(["publisher.py"])
        after = outbox_row(event["id"])
        c.note(t("during the backoff python publisher.py → {lines} (exit code {code}); the event is still unsent: "
                 "{value}", lines=lines[-1] if lines else '', code=code, value=after['sent_at'] is None))
        assert after["sent_at"] is None and after["claim_token"] is None, t(
            "the publisher claimed or sent the recovery event before its available_at")

        tl["ff"] = time.time()
        move_back("export_jobs", "id", [job_id], 11, "next_attempt_at")
        move_back("export_outbox", "id", [event["id"]], 11, "available_at")
        tl["pub2"] = time.time()
        row = run_published(c, pub, celery_app(), job_id, event["id"])
        tl.update(status=row["status"], attempts2=row["attempts"])
        c.note(t("backoff moved 11 s into the past, then published → job {status}, attempts={attempts}",
                 status=row['status'], attempts=row['attempts']))
        assert row["status"] == "succeeded", t("the recovered job ended {status}", status=row['status'])
        assert row["attempts"] == 2, t("the claim after recovery should have attempts == 2, got {attempts}",
                                       attempts=row['attempts'])
        path = published_as(row, snapshot, t("the result file is not the job's snapshot"))
        claimed_by = job_events(GATE.events, job_id, task_id=event["id"])
        c.note(t("recovery event {id} delivered {n_claimed_by} time(s); result file {name} holds the submit-time "
                 "snapshot", id=short(event['id']), n_claimed_by=len(claimed_by), name=path.name))
    finally:
        attach(c, lambda: recovery_lanes(job_id, tl))  # pass or fail: what happened so far
        GATE.release(job_id, phase="write")
        retire(jobs)


# ---------------------------------------------------------------- 15.3

def check_dead_letter_replay(c) -> None:
    st = store("decode_payload")
    rec = recovery()
    pub = publisher()
    replay_mod = learner.module("replay_job", "replay")
    job_id = st.submit_snapshot([21, 22])
    jobs = [job_id]
    fillers: list[str] = []
    tl: dict = {}  # the figure's moments (time.time())
    new_id = None
    try:
        claimed = st.claim(job_id)
        tl.update(claim=time.time(), got=claimed.get("attempts") if isinstance(claimed, dict) else None)
        assert lease_token_of(claimed), t("a fresh job could not be claimed")
        tl["moved"] = time.time()
        set_ago("export_jobs", "id", [job_id], 1, "deadline_at", "lease_until")
        scan(rec)
        tl["scan"] = time.time()
        old = job_row(job_id)
        letter = dead_letter(job_id)
        tl.update(error_code=old["error_code"], reason=letter and letter["reason"])
        c.note(t("claimed job {job_id} past its deadline, lease expired → recover_batch() → {status}/{error_code}, "
                 "dead letter {letter}", job_id=short(job_id), status=old['status'], error_code=old['error_code'],
                 letter=letter and letter['reason']))
        assert old["status"] == "failed", t("a job past its deadline should be failed, got {status}",
                                            status=old['status'])
        assert letter is not None, t("the failed job has no export_dead_letters row")

        code, output, lines = run_script(["replay_job.py", job_id])
        tl["replay"] = time.time()
        found = re.findall(UUID_RE, lines[-1]) if lines else []
        c.note(f"python replay_job.py {short(job_id)} → " + (lines[-1] if lines else t("(no output)")))
        assert code == 0 and found and found[-1] != job_id, t(
            "replay_job.py should print the new job's id (see above)")
        new_id = found[-1]
        jobs.append(new_id)
        new = job_row(new_id)
        assert new is not None, t("the printed id is not in export_jobs")
        new_events = unsent(new_id)
        c.note(t("new job {new_id}: {status}, attempts={attempts}, replay_of={replay_of}, {n_new_events} unsent "
                 "event(s)", new_id=short(new_id), status=new['status'], attempts=new['attempts'],
                 replay_of=short(new['replay_of']), n_new_events=len(new_events)))
        assert new["status"] == "queued" and new["attempts"] == 0, t(
            "the replay should be queued/0, got {status}/{attempts}", status=new['status'], attempts=new['attempts'])
        assert new["replay_of"] == job_id, t("the new job's replay_of does not point at the failed job")
        assert payload_of(new) == payload_of(old), t("the replay's payload is not the failed job's snapshot")
        assert (new["deadline_at"] - new["now"]).total_seconds() > 60, t(
            "the replay needs a fresh deadline (the old one has passed)")
        assert len(new_events) == 1, t("the replay should create exactly 1 unsent event, found {n_new_events}",
                                       n_new_events=len(new_events))
        kept, letter_after = job_row(job_id), dead_letter(job_id)
        assert all(kept[key] == old[key] for key in ("status", "attempts", "error_code")), t(
            "the replay changed the failed job (now {status}, attempts={attempts}): the old job and its evidence "
            "must stay as they were", status=kept['status'], attempts=kept['attempts'])
        assert letter_after == letter, t("the replay removed or rewrote the dead letter")
        c.note(t("the old job is still failed, attempts={attempts}, dead letter {reason} intact",
                 attempts=kept['attempts'], reason=letter['reason']))

        queued = submitted(st, jobs, [23])
        before = sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]
        code, output, lines = run_script(["replay_job.py", queued])
        tl.update(refused=time.time(), refused_code=code)
        after = sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]
        c.note(t("replay_job.py on a queued job → exit code {code}, jobs {before} → {after}", code=code, before=before,
                 after=after))
        assert code != 0 and after == before, t("only failed jobs can be replayed: a queued job must be refused with "
                                                "nothing created")

        limit = getattr(st, "ADMISSION_LIMIT", 100)
        limit = limit if type(limit) is int and 0 < limit <= 1000 else 100
        fillers = fill_admission(limit)
        before = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE replay_of=%s", (job_id,))[0]["n"]
        refused = None
        try:
            jobs.append(replay_mod.replay(job_id))
        except Exception as exc:  # noqa: BLE001 - the gate's own exception is what we expect
            refused = exc
        tl.update(gate_full=time.time(), gate_answer=type(refused).__name__ if refused else "ok")
        after = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE replay_of=%s", (job_id,))[0]["n"]
        c.note(t("with the admission gate full ({limit}) replay() → {name}", limit=limit,
                 name=type(refused).__name__ if refused else t('succeeded')))
        assert refused is not None and type(refused).__name__ == "CapacityExceeded" and after == before, t(
            "the replay created a job although capacity was full: call admit_export(cur) first in the same "
            "transaction")
        remove_jobs(fillers)
        fillers = []

        tl["pub"] = time.time()
        done = run_published(c, pub, celery_app(), new_id, new_events[0]["id"])
        tl.update(done=time.time(), status=done["status"])
        assert done["status"] == "succeeded", t("the replay ended {status}", status=done['status'])
        path = published_as(done, payload_of(old), t("the replay's file is not the old snapshot"))
        c.note(t("the replay, published, succeeded; file {name} holds the old snapshot", name=path.name))
    finally:
        attach(c, lambda: dead_letter_lanes(job_id, new_id, tl))  # pass or fail: what happened so far
        if fillers:
            remove_jobs(fillers)
        retire(jobs)


# ---------------------------------------------------------------- 15.8

def check_exhausted(c) -> None:
    st = store()
    rec = recovery()
    app = celery_app()
    declared_worker()
    job_id = st.submit_snapshot([47])
    jobs = [job_id]
    tl: dict = {}  # the figure's moments (time.time())
    try:
        trail = []
        for attempt in (1, 2, 3):
            tl[f"due{attempt}"] = time.time()
            make_due(job_id)
            job = st.claim(job_id)
            tl.update({f"claim{attempt}": time.time(), f"got{attempt}": job.get("attempts") if isinstance(job, dict)
                       else None})
            assert lease_token_of(job), t("claim {attempt} got no token (the job should be claimable)", attempt=attempt)
            assert job["attempts"] == attempt, t("claim {attempt} should have attempts {attempt}, got {attempts}",
                                                 attempt=attempt, attempts=job['attempts'])
            tl[f"expire{attempt}"] = time.time()
            expire_lease(job_id)
            scan(rec)
            tl[f"scan{attempt}"] = time.time()
            row = job_row(job_id)
            tl.update({f"status{attempt}": row["status"], f"error{attempt}": row["error_code"]})
            trail.append(f"{attempt}: {row['status']}/{row['error_code']}")
            if attempt < 3:
                assert row["status"] == "queued", t("after expired claim {attempt} the job should be queued again, "
                                                    "got {status}", attempt=attempt, status=row['status'])
        c.note(t("three claims, each lease expired and scanned → {trail}", trail=t('; ').join(trail)))
        row, letter = job_row(job_id), dead_letter(job_id)
        assert row["status"] == "failed" and row["attempts"] == 3, t(
            "after the third expiry the job should be failed with attempts 3, got {status}/{attempts}: the scan must "
            "move jobs with attempts>=3 to failed with a dead letter", status=row['status'], attempts=row['attempts'])
        tl["reason"] = letter and letter["reason"]
        assert letter is not None, t("the failed job has no dead letter")
        make_due(job_id)
        fourth = st.claim(job_id)
        tl.update(fourth=time.time(), fourth_answer="None" if fourth is None else "a job")
        end = wait_end(send(app, job_id))
        scan(rec)
        row = job_row(job_id)
        letters = len(dead_letters(job_id))
        c.note(t("dead letter {reason}; a 4th claim() → {token_of}, a message → {shown}; afterwards {status}, "
                 "attempts={attempts}, {letters} dead letter(s)", reason=letter['reason'],
                 token_of=lease_token_of(fourth), shown=shown(end), status=row['status'], attempts=row['attempts'],
                 letters=letters))
        assert fourth is None and row["status"] == "failed" and row["attempts"] == 3 and letters == 1, t(
            "a 4th claim happened after exhaustion, or the failed job changed")
    finally:
        attach(c, lambda: exhausted_lanes(tl))  # pass or fail: what happened so far
        retire(jobs)


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    run(checks(), around=explained)
