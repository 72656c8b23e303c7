"""Lesson 16's failure-matrix drills, rows 1-8 (kit module, not a lesson file): a job's own way from its
submit to its result, with one fault each — the commit, the broker, the lost confirm, the worker that dies
holding the lease, the old token that finishes late, the cancel, exhausted attempts, the expired result
cache.  How a drill runs and what its verdict rests on: lab16_cases.
"""

from __future__ import annotations

import json
from uuid import uuid4

from lab16_fixture import (GATE, PROBE, RESULT_TTL, ask, claim_seconds_left, confirm_lost, deliveries, events_of,
                           learner, outbox_insert_fails, pending_of, seconds_until)
from lab16_publishing import CACHE_PUBLISHER
from lab16_row import LEASE_BUDGET, Row, await_hold, scan_until, settle

from shared import handshake
from shared.events import short
from shared.scripts import run_script
from shared.settings import WORK, redact, setting
from shared.i18n import t
from shared.lesson_db import dead_letters, job_event_counts, job_row, request_cancel, wait_status
from shared.proc import free_port, kill_pid, stopped, wait_until


def raised(error: Exception | None) -> str:
    return type(error).__name__ if error else t('no exception')


def case_commit_fault(row: Row, stack) -> None:
    before = job_event_counts()
    with row.fault(t("the outbox INSERT fails before the commit (kit trigger), after the job INSERT")):
        error = None
        with outbox_insert_fails():
            try:
                stack.state_store.submit_snapshot(row.products())
            except Exception as exc:  # noqa: BLE001 - any exception is what the drill expects
                error = exc
        after = job_event_counts()
        row.observe("absent")
        row.note(t("submit_snapshot → {name}; jobs {before}→{after}, events {before2}→{after2}", before=before[0],
                   name=raised(error), after=after[0], before2=before[1], after2=after[1]))
        row.expect(error is not None, t("submit_snapshot raised nothing although the outbox insert failed"))
        row.expect(after == before, t("rows were left behind: the job and the outbox event did not roll back together"))
    row.recover()
    job = row.submit()
    settle(row, job)
    row.recovered()


def case_broker_down(row: Row, stack) -> None:
    if stack.private:
        with row.fault(t("the private broker (redis-server) is stopped")):
            pid = stack.broker_stop()
            job = row.submit()
            error = stack.publish_once()
            row.note(t("broker pid {pid} stopped; submit → {job} queued; publish_one → {name}", pid=pid,
                       job=short(job), name=raised(error)))
    else:  # no redis-server binary here: only this publisher is pointed at a port nobody listens on
        with row.fault(t("the publisher points at a port with no broker")):
            job = row.submit()
            done = run_script(["publisher.py"], 120, env={"CELERY_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"})
            error = None if done.code == 0 and "True" in done.output else RuntimeError("publish failed")
    event = events_of(job)
    row.expect(error is not None, t("publish_one reported no error with the broker down (send error swallowed?)"))
    row.expect(len(event) == 1 and event[0]["sent_at"] is None,
               t("with the broker down the event must stay, sent_at NULL"))
    row.expect((job_row(job) or {}).get("status") == "queued", t("with the broker down the job must stay queued"))
    row.observe("queued+unsent")
    row.recover()
    if stack.private:
        stack.broker_start()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the failed publisher's claim runs out
    settle(row, job)
    row.recovered()


def case_publish_before_mark(row: Row, stack) -> None:
    job = row.submit()
    event = pending_of(job)[0]["id"]
    with row.fault(t("the confirm write after a successful send fails once (kit trigger)")):
        with confirm_lost(event):
            error = stack.publish_once()
        row.expect(any(e["id"] == event for e in pending_of(job)), t(
            "after the lost confirm the event must still be unsent"))
        stack.wait_ended(job, 1)
        first = job_row(job)
        row.note(t("publish_one → {name}; after delivery 1 the job is {status}, the event still sent_at=NULL",
                   name=raised(error), status=first['status']))
    row.recover()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the publisher's claim runs out: the event is due again
    stack.drain()
    stack.wait_ended(job, 2)
    after = settle(row, job)
    sent = [e for e in events_of(job) if e["id"] == event]
    again = [d for d in deliveries(job) if d["task_id"] == event]
    row.expect(sent and sent[0]["sent_at"] is not None, t("after resending the event must be confirmed"))
    row.expect(len(again) >= 2, t("the event should arrive twice, got {n_again}", n_again=len(again)))
    unchanged = first["status"] != "succeeded" or after["result_ref"] == first["result_ref"]
    row.expect(after["attempts"] == 1 and unchanged,
               t("the duplicate delivery changed the result: attempts {attempts}, result_ref unchanged={unchanged}",
                 attempts=after['attempts'], unchanged=unchanged))
    row.note(t("event {event} delivered {n_again} times (same message id), attempts 1, one result_ref",
               event=short(event), n_again=len(again)))
    row.recovered()


def case_worker_exit(row: Row, stack) -> None:
    job = row.submit()
    held = await_hold(row, job)
    running = job_row(job)
    row.expect(running["status"] == "running" and running["attempts"] == 1, t(
        "the held execution should be running with attempts 1"))
    token = running["lease_token"]
    pid = int(held["pid"])
    # task_reject_on_worker_lost sends the message back once the pool notices: that redelivery and the
    # recovery event race for the job later, and claim() lets only one of them in.  The worker stays stopped
    # from before the kill until recovery has queued the job, so the redelivery comes during the backoff or
    # after it, never between recover_batch and the read of the row: there a claim that ignores the backoff
    # (15.5's mistake) would look like a recovery that never queued the job.
    with stopped(stack.worker.pid):  # continued, its claim of the old message finds the job in its backoff
        with row.fault(t("SIGKILL to the pool child holding the lease, pid {pid}", pid=pid)):
            kill_pid(pid, 30, t("pid {pid} to die", pid=pid), interval=0.02)
            still = job_row(job)
            row.expect(still["status"] == "running" and still["lease_token"] == token,
                       t("until the lease runs out the dead executor still holds the job (running, same token)"))
            row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)  # the lease runs out now
            row.clock_from_here()
            row.observe("running (lease expired)")
        row.recover()
        scan_until(stack, job, ("queued",))
        backoff = seconds_until(job, "next_attempt_at")
    row.note(t("recover_batch → queued, next_attempt_at {backoff:.1f}s ahead", backoff=backoff))
    row.advance(job, backoff + 0.001)
    settle(row, job, condition=lambda r: r["attempts"] >= 2 and r["status"] in ("running", "succeeded"))
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 2 and final["lease_token"] != token, t(
        "the claim after recovery must be attempts 2 with a new token"))
    row.extra["budget_seconds"] = LEASE_BUDGET
    row.extra["backoff_seconds"] = round(backoff, 3)


def case_stale_token(row: Row, stack) -> None:
    job = row.submit()
    old = stack.state_store.claim(job)
    row.expect(old is not None, t("a fresh job must be claimable"))
    token_a = str(old["lease_token"])
    # The first executor stalls: its lease runs out and recovery requeues the job (time moved, not waited).
    row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)
    scan_until(stack, job, ("queued",))
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001, setup=True)
    await_hold(row, job)
    current = job_row(job)
    row.expect(current["status"] == "running" and current["attempts"] == 2 and current["lease_token"] != token_a,
               t("the worker should hold a new token (attempts 2)"))
    target = WORK / "artifacts" / f"{job}.{token_a}.json"
    with row.fault(t("the old token's executor arrives late and calls finish")):
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(old["payload"], ensure_ascii=False), encoding="utf-8")
        late = stack.state_store.finish(job, token_a, str(target))
        now = job_row(job)
        row.note(t("finish(old token) → {late}; result_ref={result_ref!r}", late=late, result_ref=now['result_ref']))
        row.expect(late is False, t("finish with the old token must return False"))
        row.expect(now["result_ref"] is None and now["lease_token"] == current["lease_token"],
                   t("the old token must not write result_ref or take the lease back"))
    row.recover()
    GATE.release(job)
    final = wait_status(job, ("succeeded",), 60)
    again = stack.state_store.finish(job, token_a, str(target))
    after = job_row(job)
    row.expect(again is False and after["result_ref"] == final["result_ref"] and final["result_ref"] != str(target),
               t("after success the old token still cannot overwrite result_ref"))
    row.recovered()
    stack.drain()


def case_cancel(row: Row, stack) -> None:
    job = row.submit()
    await_hold(row, job)
    with row.fault(t("cancel_requested=TRUE while the export runs")):
        request_cancel(job)
        GATE.release(job)
        stack.wait_ended(job, 1)
        now = job_row(job)
        row.expect(now["status"] != "succeeded" and now["result_ref"] is None,
                   t("a success was published after the cancel ({status}, {result_ref!r})", status=now['status'],
                     result_ref=now['result_ref']))
    row.recover()
    if now["status"] == "running":  # the scanner finishes it once the lease is over (moved, not waited)
        row.advance(job, seconds_until(job, "lease_until") + 0.001)
    final = scan_until(stack, job, ("cancelled",))
    row.expect(final["result_ref"] is None, t("a cancelled job must have no result_ref"))
    row.recovered()
    stack.drain()


def case_exhausted(row: Row, stack) -> None:
    job = row.submit()
    with row.fault(t("three claims in a row, each lost with its lease (kit claims that never finish)")):
        for n in (1, 2, 3):
            got = stack.state_store.claim(job)
            row.expect(got is not None and got["attempts"] == n, t("claim {n} should work with attempts={n}", n=n))
            row.advance(job, seconds_until(job, "lease_until") + 0.001)
            scan_until(stack, job, ("queued",) if n < 3 else ("failed",))
            if n < 3:
                row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
        letters = dead_letters(job)
        fourth = stack.state_store.claim(job)
        row.note(t("after 3 expiries → failed, dead letter {value}; claim 4 → {fourth}", fourth=fourth,
                   value=[d['reason'] for d in letters]))
        row.expect(len(letters) == 1, t("an exhausted job must have one dead letter"))
        row.expect(fourth is None, t("there must be no fourth claim"))
    row.recover()
    stack.drain()  # the recovery events still pending are delivered: nothing may claim
    final = job_row(job)
    row.expect(final["status"] == "failed" and final["attempts"] == 3 and final["result_ref"] is None,
               t("the end state must be failed/3 without result_ref, got {status}/{attempts}", status=final['status'],
                 attempts=final['attempts']))
    row.recovered()


def case_result_cache(row: Row, stack) -> None:
    import redis
    job = row.submit()
    event = pending_of(job)[0]["id"]
    backend = redis.Redis.from_url(setting("CELERY_RESULT_BACKEND"), socket_connect_timeout=2, socket_timeout=3)
    key = f"celery-task-meta-{event}"
    try:
        with row.fault(t("the worker running this job keeps results {result_ttl} s (result_expires shortened)",
                         result_ttl=RESULT_TTL)):
            if stack.cache_publisher is not None:
                handshake.go(stack.cache_folder, [CACHE_PUBLISHER])
                outcome = handshake.wait_result(stack.cache_folder, CACHE_PUBLISHER, timeout=120)
                row.expect(outcome.get("published") is True, t(
                    "publish_one failed: {outcome}", outcome=redact(str(outcome))))
            else:
                stack.pump()
            settle(row, job)
            stack.wait_ended(job, 1)
            asked = [d.get("ignore_result") for d in deliveries(job)]
            if any(asked):  # the message itself said "keep no result": there is nothing to expire
                seen = t("never stored (the message said ignore_result=True)")
            else:
                # The worker stores a result before its task_postrun (the probe's end event), so it is
                # there now unless its 2 s already ran out; either way it must be gone below.
                cached = backend.exists(key)
                wait_until(lambda: not backend.exists(key), RESULT_TTL + 60,
                           t("the Celery result to expire"), interval=0.05)
                seen = (t("stored, expired after {result_ttl} s", result_ttl=RESULT_TTL)
                        if cached else t("already expired ({result_ttl} s)", result_ttl=RESULT_TTL))
            state = ask("celery_state", event)  # AsyncResult(event, app=the learner's app).state, in the probe
            row.note(t("Celery result: {seen}; now AsyncResult.state={state}", seen=seen, state=state))
            row.observe(f"celery:{state}")
            row.expect(state == "PENDING", t("the result should be gone (PENDING), got {state}", state=state))
    finally:
        backend.close()
    row.recover()
    if (WORK / "api_db.py").is_file():
        learner("api_db")  # an import that fails is said as such
        with PROBE.app("api_db:app") as client:  # the learner's app behind a TestClient, in the probe
            found = client.get(f"/exports/{job}")
            missing = client.get(f"/exports/{uuid4()}")
        body = found.json() if found.status_code == 200 else {}
        row.note(t("GET /exports/{job} → {status_code} {status}; unknown id → {status_code2}", job=short(job),
                   status_code=found.status_code, status=body.get('status'), status_code2=missing.status_code))
        row.expect(found.status_code == 200 and body.get("status") == "succeeded",
                   t("after the cache expired the query must be 200 succeeded, got {status_code}",
                     status_code=found.status_code))
        row.expect(missing.status_code == 404, t("only a job that does not exist is 404"))
    else:
        found = ask("status_in_transaction", job)  # through the learner's own transaction(), in the probe
        row.expect(found and found["status"] == "succeeded", t("after the cache expired export_jobs must still answer"))
    row.recovered()
