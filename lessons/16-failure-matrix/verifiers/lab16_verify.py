"""Verifier for lesson 16: phase logs, monitor queries, terminal verification and the failure matrix.

16.1  the learner's verification-record.json is evidence: every row says pass, fail or not_run with the
      form's rules (a pass row: a UUID job_id, an operation time, real statuses in observed_states, a
      measured recovery_seconds, a counted duplicate_deliveries); at least one row is pass; each pass
      row is re-earned here — run again on the learner's code, the row this run writes is backed by
      the database and the deliveries, and the learner's row says what it shows (lab16_evidence).
      The course's template, nothing run, fails with every row and why it is not backed.
16.2  python verify_terminal.py <job_id>: a job run by the worker → "artifact verified"; a succeeded row
      whose file holds the payload with other key order and spacing → verified; a file whose values
      differ, a result_ref escaping artifacts/ (artifacts/../x.json) and a cancelled job with a
      result_ref → exit 1 and no "artifact verified"; a failed job without result_ref →
      "terminal without published artifact"
16.3  matrix rows result_cache_expired, queue_full, same_slot_concurrent pass
16.4  matrix rows sent_not_claimed, duplicate_during_backoff, cross_minute_redelivery pass
16.5  with the learner's claim and recover_batch (no worker): a re-dispatch (sent, lost, overdue)
      leaves attempts 0 and only the claim makes it 1; an expired lease is requeued with
      next_attempt_at in the future and its new event available at that same moment, nothing claims
      before it; a queued job and an expired running job past deadline_at go to failed with a dead
      letter and no new event
16.6  a job through the worker: JSON phase lines with job_id, phase, message_id (= the delivered task
      id), lease_token (= the row's token) and attempt; the whole worker log holds no product
      description, no password, no URL with credentials
16.7  monitor_exports.sql in a scratch schema: every statement runs; empty, the ages are NULL (not 0);
      with known rows, counts and ages (42 s, 75 s) come out right
16.8  all 15 matrix rows: pass, fresh job each, one fault each, evidence consistent with the database
16.9  measured recovery: worker_exit_with_lease ≤ 60 s, sent_not_claimed and fail_before_claim ≤ 90 s
16.10 exercise: publish-before-mark while the first delivery is slow: the worker's phase lines tie two
      deliveries of the same message id to the job with two different lease tokens; the old token's
      line reports no success, and the one result_ref is the new token's file

The matrix's stack (private broker, workers) starts once, before the first check, when a selected check
needs it; each matrix row runs at most once per verifier run, when the first check that needs it asks.
Times that can be set are moved, never waited out; waits poll facts within generous bounds.  Credentials
are never printed.  The checks' helpers: lab16_shared_stack (what the checks share), lab16_evidence (16.1),
lab16_terminal (16.2), lab16_worker_log (16.6, 16.10), lab16_monitor (16.7) and the matrix's parts
(lab16_failure_matrix).  None imports learner code: that runs in the probe (lab16_learner.py), in the
worker (lab16_worker.py) and in the learner's own scripts.
"""

from __future__ import annotations

import json
from uuid import UUID

from lab16_cases import CASE_IDS
from lab16_evidence import backing_problems, claim_problems, learner_record, real_statuses, why_not_backed
from lab16_fixture import (GATE, advance, artifact_evidence, claim_seconds_left, confirm_lost, deliveries, ended,
                           events_of, learner, park, pending_of, seconds_until)
from lab16_monitor import (age_bounds, insert_known_rows, load_schemas, number, pick, run_monitor, scratch_schema,
                           server_now, waiting_since)
from lab16_record import RECORD, row_problems
from lab16_row import Row, scan_until, settle, unclaimed_reason
from lab16_shared_stack import Shared, describe, run_rows
from lab16_terminal import terminal_cases
from lab16_worker_log import job_phase_lines, log_leaks, worker_logs

from shared.events import short
from shared.scripts import run_script
from shared.settings import WORK
from shared.i18n import t
from shared.lesson_db import dead_letters, dispatched_unclaimed, first_product, job_row, payload_of, sql
from shared.proc import wait_until
from shared.tap import Check, run

ROWS_FOR = {
    "16.3": ["result_cache_expired", "queue_full", "same_slot_concurrent"],
    "16.4": ["sent_not_claimed", "duplicate_during_backoff", "cross_minute_redelivery"],
    "16.8": CASE_IDS,
    "16.9": ["worker_exit_with_lease", "sent_not_claimed", "fail_before_claim"],
}
NEEDS_STACK = {"16.2", "16.3", "16.4", "16.6", "16.8", "16.9", "16.10"}  # and 16.1 when the record claims a row


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the box's MariaDB; the ones marked `stack` the
    matrix's stack too."""
    return [
        Check("16.1", check_record, "verification-record.json; stack for the rows it marks pass"),
        Check("16.2", check_terminal, "stack; python verify_terminal.py"),
        Check("16.3", lambda c: check_rows(c, ROWS_FOR["16.3"]), "stack: its three matrix rows"),
        Check("16.4", lambda c: check_rows(c, ROWS_FOR["16.4"]), "stack: its three matrix rows"),
        Check("16.5", check_durable_waits, "the learner's claim and recover_batch, no worker"),
        Check("16.6", check_phase_logs, "stack: a job through the worker, its log"),
        Check("16.7", check_monitor, "monitor_exports.sql in a scratch schema"),
        Check("16.8", check_all_rows, "stack: all 15 matrix rows"),
        Check("16.9", check_budgets, "stack: three matrix rows' recovery times"),
        Check("16.10", check_two_deliveries, "stack: publish-before-mark with a slow first delivery"),
    ]


# ---------------------------------------------------------------- 16.1

def check_record(c) -> None:
    """The learner's record is evidence: its form, at least one pass, and every pass re-earned here."""
    rows, unreadable = learner_record()
    assert not unreadable, unreadable
    names = [r.get("case") for r in rows if isinstance(r, dict)]
    repeated = sorted({n for n in names if n and names.count(n) > 1})
    claimed = [r for r in rows if isinstance(r, dict) and r.get("result") == "pass"]
    jobs = [str(r.get("job_id")) for r in claimed]
    shared_jobs = sorted({j for j in jobs if jobs.count(j) > 1})
    c.note(t("{n_rows} rows, {n_claimed} of them pass", n_rows=len(rows), n_claimed=len(claimed)))
    problems = [p for row in rows for p in row_problems(row)]
    for problem in problems[:6]:
        c.note("  " + problem)
    assert not repeated, t("repeated case names: {repeated}", repeated=repeated)
    assert not problems, t("the record claims results its evidence does not support (above): pass only from a real "
                           "run, rows not run stay not_run")
    assert not shared_jobs, t("several rows name the same job_id {shared_jobs}: each drill runs on a fresh job",
                              shared_jobs=shared_jobs)
    unknown = sorted(r["case"] for r in claimed if r["case"] not in CASE_IDS)
    assert not unknown, t("{unknown} are not cases of failure-matrix.md: there is nothing to re-run them with",
                          unknown=unknown)
    listing = "; ".join(f"{r.get('case') if isinstance(r, dict) else '?'}: {why_not_backed(r)}" for r in rows)
    assert claimed, t("no row is backed by evidence: {listing}. Run a drill, write down what you read, then mark "
                      "that row pass", listing=listing)

    # Your job ids name jobs of your own drills, in a database no check run sees: each claim is re-earned
    # instead — run again on your code, backed by this run's database and deliveries, and saying what it shows.
    run = run_rows(c, [r["case"] for r in claimed],
                   t("the rows you marked pass, run again on your code"),
                   yours={r["case"]: r for r in claimed})
    versions = {UUID(r["job_id"]).version for r in run.values() if r.get("job_id")}
    c.note(t("the {n_claimed} rows you marked pass were run again on your code; this run's record: {record}",
             n_claimed=len(claimed), record=RECORD))
    unbacked = []
    for mine in claimed:
        here = run[mine["case"]]
        found = claim_problems(mine, here, versions)
        if here["result"] == "pass":
            found += backing_problems(here)
        states = "→".join(real_statuses(here["observed_states"]))
        this_job = short(here["job_id"]) if here.get("job_id") else "-"
        c.note(t("  {value} {case}: your job {job_id}; this run's job {this_job}: {states}, attempts {attempts}",
                 value='✓' if not found else '✗', case=mine['case'], job_id=short(str(mine['job_id'])),
                 this_job=this_job, states=states, attempts=here['attempts']))
        unbacked += found
    for problem in unbacked[:6]:
        c.note("  " + problem)
    assert not unbacked, t("{n_unbacked} claim(s) of the record are not backed by this run's facts: {unbacked}",
                           n_unbacked=len(unbacked), unbacked=unbacked[0])


# ---------------------------------------------------------------- 16.2

def check_terminal(c) -> None:
    assert (WORK / "verify_terminal.py").is_file(), t("the folder has no verify_terminal.py")
    stack = Shared.get_stack()
    helper = Row(None, stack)
    job = stack.state_store.submit_snapshot(stack.product(3))
    real = settle(helper, job)
    for line in helper.notes:
        c.note(line)
    sha, where = artifact_evidence(real)  # the kit's own look first: inside artifacts/, JSON == payload
    c.note(t("job {job} run by the worker: {where} (sha256 {sha}…) inside artifacts, content == payload", where=where,
             job=short(job), sha=sha[:10]))
    wrong_answers = []
    for label, job_id, should_pass, expected in terminal_cases(job, payload_of(real)):
        code, output, _ = run_script(["verify_terminal.py", job_id], 30)  # the learner's script, as a process
        last = (output.strip().splitlines() or [""])[-1][:120]
        c.note(t("  {label}: exit {code} → {last}", label=label, code=code, last=last))
        if should_pass:
            if code != 0 or expected not in output:
                wrong_answers.append(t("{label}: should exit 0 and print {expected}", label=label, expected=expected))
        elif code == 0 or "artifact verified" in output:
            wrong_answers.append(t("{label}: should fail (non-zero exit, no 'artifact verified')", label=label))
    assert not wrong_answers, "; ".join(wrong_answers) + t(
        ". verify_terminal must resolve and check is_relative_to(artifacts), and compare the file's JSON with "
        "decode_payload's values")


# ---------------------------------------------------------------- 16.3 / 16.4 / 16.8 / 16.9

def check_rows(c, names: list[str]) -> None:
    rows = run_rows(c, names, t("failure matrix: {n_names} rows", n_names=len(names)))
    for name in names:
        c.note(describe(rows[name]))
        for line in rows[name].get("notes", [])[:3]:
            c.note("    " + line)
    for name in names:
        assert rows[name]["result"] == "pass", t("matrix row {name} did not pass: {error}", name=name,
                                                 error=rows[name].get('error') or rows[name]['result'])


def check_all_rows(c) -> None:
    run_rows(c, CASE_IDS, t("failure matrix: all {n_case_ids} rows", n_case_ids=len(CASE_IDS)))
    rows = Shared.matrix.record()["cases"]
    c.note(t("record: {record}", record=RECORD))
    for row in rows:
        c.note(describe(row) + (f" — {row['error'][:140]}" if row.get("error") else ""))
    assert [r["case"] for r in rows] == CASE_IDS, t("the record must hold the 15 rows in order")
    failed = [r for r in rows if r["result"] != "pass"]
    assert not failed, t("{n_failed}/15 pass; not passed: {value}", n_failed=15 - len(failed),
                         value=', '.join(r['case'] for r in failed))
    problems = [p for r in rows for p in row_problems(r)]
    assert not problems, t("the record breaks the rules: {problems}", problems=problems[0])
    assert all(r.get("faults_injected") == 1 for r in rows), t("each row must inject exactly one fault")
    mains = [r["job_id"] for r in rows]
    every = [j for r in rows for j in r.get("job_ids", [])]
    assert len(set(every)) == len(every), t("rows shared a job: each row needs fresh jobs")
    unbacked = [p for row in rows for p in backing_problems(row)]  # still true now: database, deliveries, files
    assert not unbacked, t("the record disagrees with the database, the deliveries or the files: {unbacked}",
                           unbacked=unbacked[0])
    redispatched = [f"{r['case']}: {d['reason']}" for r in rows for d in r.get("redispatches") or []]
    for line in redispatched:
        c.note(t("  re-dispatched ") + line)
    c.note(t("15/15 pass; 15 distinct main jobs ({n_mains}), one fault per row; the record agrees with the database "
             "and the files; {n_redispatched} re-dispatch(es) (only after the database refused a claim)",
             n_mains=len(set(mains)), n_redispatched=len(redispatched)))


def check_budgets(c) -> None:
    names = ROWS_FOR["16.9"]
    rows = run_rows(c, names, t("failure matrix: the rows with a recovery budget"))
    over = []
    for name in names:
        row = rows[name]
        assert row["result"] == "pass" and row.get("recovery_seconds") is not None, t(
            "{name} did not pass, so its budget cannot be checked: {error}", name=name,
            error=row.get('error') or row['result'])
        budget = row["budget_seconds"]
        detail = t("measured {measured_seconds} s + durable time moved {time_moved_seconds} s",
                   measured_seconds=row['measured_seconds'], time_moved_seconds=row['time_moved_seconds'])
        if name == "worker_exit_with_lease":
            detail += t(" (backoff {backoff_seconds} s)", backoff_seconds=row.get('backoff_seconds'))
            what = t("lease expired → claimed again")
        else:
            what = t("dispatch → claimed again")
            if row.get("unclaimed_age_seconds") is not None:
                detail += t(" (the scan resent {unclaimed_age_seconds:.0f} s after the dispatch)",
                            unclaimed_age_seconds=row['unclaimed_age_seconds'])
        # A re-dispatch after the database refused a claim is a second fault, not the path this budget
        # measures: its seconds are shown, and left out of the comparison.
        extra = round(sum(r["seconds"] for r in row.get("redispatches") or [] if r.get("during_recovery")), 3)
        path = round(row["recovery_seconds"] - extra, 3)
        if extra:
            detail += t("; {extra} s of it came from re-dispatching after the database refused a claim, left out of "
                        "this path", extra=extra)
        ok = path <= budget
        c.note(f"{name}: {what} {path} s {'≤' if ok else '>'} {budget:g} s — {detail}")
        if not ok:
            over.append(name)
    assert not over, t("over the recovery budget: {over}. Check the scan period, the backoff (10 s for an expired "
                       "lease), the unclaimed threshold (60 s) and the queue wait", over=', '.join(over))


# ---------------------------------------------------------------- 16.5

def check_durable_waits(c) -> None:
    store = learner("state_store")
    recovery = learner("recovery")
    product = [first_product()]
    made: list[str] = []
    try:
        # (a) a re-dispatch: sent, lost, overdue → a new event, attempts untouched; only the claim counts
        lost = store.submit_snapshot(product)
        made.append(lost)
        dispatched_unclaimed(lost)
        advance(lost, 61)
        recovery.recover_batch()
        recovery.recover_batch()
        after = job_row(lost)
        pending = pending_of(lost)
        c.note(t("dispatched 61 s ago, unclaimed → 2 scans: {n_pending} pending event(s), attempts {attempts}, "
                 "{status}", n_pending=len(pending), attempts=after['attempts'], status=after['status']))
        assert after["status"] == "queued" and len(pending) == 1, t(
            "a sent-but-unclaimed job must be queued with exactly one new event")
        assert after["attempts"] == 0, t("re-dispatching set attempts to {attempts}: only a real claim may add one",
                                         attempts=after['attempts'])
        got = store.claim(lost)
        assert got is not None and got["attempts"] == 1, t("the first claim after recovery must work with attempts=1")
        c.note(t("the next claim → attempts 1 (only claims count)"))

        # (b) an expired lease: requeued with a future next_attempt_at; its event waits for the same moment
        slow = store.submit_snapshot(product)
        made.append(slow)
        first = store.claim(slow)
        assert first is not None, t("a fresh job must be claimable")
        advance(slow, seconds_until(slow, "lease_until") + 0.001)
        recovery.recover_batch()
        row = job_row(slow)
        wait = seconds_until(slow, "next_attempt_at")
        newest = sql("SELECT available_at, (available_at > NOW(6)) AS later, "
                        "(available_at = (SELECT next_attempt_at FROM export_jobs WHERE id=%s)) AS same "
                        "FROM export_outbox WHERE job_id=%s AND sent_at IS NULL ORDER BY created_at DESC, id LIMIT 1",
                        (slow, slow))
        early = store.claim(slow)
        c.note(t("lease expired → scan: {status}, next_attempt_at {wait:.1f}s ahead; the new event's available_at is "
                 "the same: {bool}; claim now → {early}", status=row['status'], wait=wait,
                 bool=bool(newest and newest[0]['same']), early=early and early['attempts']))
        assert row["status"] == "queued" and wait > 0, t("an expired lease must come back queued with "
                                                         "next_attempt_at ahead")
        assert newest and newest[0]["later"] and newest[0]["same"], t(
            "the recovery event's available_at must equal next_attempt_at (the publisher must not send early)")
        assert early is None and job_row(slow)["attempts"] == 1, t(
            "a claim during the backoff must fail and leave attempts alone")

        # (c) past the deadline: a queued job and an expired running job both end failed, never re-sent
        queued_late = store.submit_snapshot(product)
        running_late = store.submit_snapshot(product)
        made += [queued_late, running_late]
        assert store.claim(running_late) is not None, t("a fresh job must be claimable")
        events_before = {j: len(events_of(j)) for j in (queued_late, running_late)}
        advance([queued_late, running_late], 601)  # ten minutes and a second pass
        recovery.recover_batch()
        for job_id, label in ((queued_late, "queued"), (running_late, "running")):
            row = job_row(job_id)
            letters = dead_letters(job_id)
            new_events = len(events_of(job_id)) - events_before[job_id]
            c.note(t("{label} job past its deadline → {status}, dead letter {value}, new events {new_events}",
                     label=label, status=row['status'], value=[d['reason'] for d in letters], new_events=new_events))
            assert row["status"] == "failed" and letters and new_events == 0, t(
                "a {label} job past its deadline must become failed with a dead letter, never re-sent", label=label)
            assert store.claim(job_id) is None, t("a job past its deadline cannot be claimed")
    finally:
        park(made)


# ---------------------------------------------------------------- 16.6

def check_phase_logs(c) -> None:
    stack = Shared.get_stack()
    helper = Row(None, stack)
    job = stack.state_store.submit_snapshot(stack.product(2))
    final = settle(helper, job)
    delivered = [d["task_id"] for d in deliveries(job)]
    lines = job_phase_lines(stack, job, len(delivered))
    for line in lines[:4]:
        c.note("  " + json.dumps(line, ensure_ascii=False)[:220])
    assert lines, t("the worker log has no JSON phase line (event=export_phase) for the job: call log_phase after "
                    "the claim and after finishing")
    keys = ("job_id", "phase", "message_id", "lease_token", "attempt")
    missing = sorted({k for line in lines for k in keys if k not in line})
    assert not missing, t("phase lines lack the fields {missing}", missing=missing)
    claimed = [line for line in lines if line.get("lease_token")]
    assert claimed, t("no line carries a lease_token: log the claim's token")
    first = claimed[0]
    assert first["message_id"] in delivered, t("message_id {message_id!r} is not the delivered message id "
                                               "{delivered}: use bind=True and self.request.id", delivered=delivered,
                                               message_id=first['message_id'])
    assert str(first["lease_token"]) == str(final["lease_token"]), t(
        "the logged lease_token differs from the claim's token in the database")
    assert first["attempt"] == final["attempts"] == 1, t("attempt must be the real attempts (1), got {attempt!r}",
                                                         attempt=first['attempt'])
    c.note(t("{n_lines} lines; message_id = the delivered task id, lease_token = the database token, attempt = 1",
             n_lines=len(lines)))

    text = worker_logs(stack)
    leaks = log_leaks(text)
    c.note(t("scanned {n_splitlines} worker log lines for descriptions, passwords, URLs with credentials → {found}",
             n_splitlines=len(text.splitlines()), found=t('found') if leaks else t('none')))
    assert not leaks, t("the logs contain {leaks}: log_phase records ids and phases only, never the payload or "
                        "connection details", leaks=t(', ').join(leaks))


# ---------------------------------------------------------------- 16.7

def check_monitor(c) -> None:
    from shared.servicectl import split_sql
    path = WORK / "monitor_exports.sql"
    assert path.is_file(), t("the folder has no monitor_exports.sql")
    statements = split_sql(path.read_text(encoding="utf-8"))
    with scratch_schema() as cur:
        load_schemas(cur)
        empty = run_monitor(cur, statements)
        unpublished = pick(empty, "oldest_unpublished_seconds")[0]
        dispatch = pick(empty, "oldest_dispatch_age")[0]
        c.note(t("empty: unpublished={unpublished} age={oldest_unpublished_seconds}; "
                 "queued_without_pending={queued_without_pending} age={oldest_dispatch_age}",
                 unpublished=unpublished['unpublished'],
                 oldest_unpublished_seconds=unpublished['oldest_unpublished_seconds'],
                 queued_without_pending=dispatch['queued_without_pending'],
                 oldest_dispatch_age=dispatch['oldest_dispatch_age']))
        assert unpublished["oldest_unpublished_seconds"] is None and dispatch["oldest_dispatch_age"] is None, t(
            "with no matching rows the ages must be NULL, not 0 (no COALESCE/IFNULL)")
        assert int(unpublished["unpublished"]) == 0 and int(pick(empty, "expired_leases")[0]["expired_leases"]) == 0

        ids = insert_known_rows(cur)
        before = server_now(cur)
        full = run_monitor(cur, statements)
        after = server_now(cur)
        waiting, dispatched = waiting_since(cur, ids)
    statuses = {r["status"]: int(r["total"]) for r in pick(full, "total")}
    unpublished = pick(full, "oldest_unpublished_seconds")[0]
    expired = int(pick(full, "expired_leases")[0]["expired_leases"])
    reasons = {r["reason"]: int(r["failed"]) for r in pick(full, "reason")}
    dispatch = pick(full, "oldest_dispatch_age")[0]
    listing = [r["id"] for r in pick(full, "next_attempt_at")]
    age_new = number(unpublished["oldest_unpublished_seconds"])
    age_sent = number(dispatch["oldest_dispatch_age"])
    c.note(t("known rows: statuses {statuses}; unpublished {unpublished}, oldest {age_new} s; expired leases "
             "{expired}; reasons {reasons}; queued without pending {queued_without_pending}, oldest {age_sent} s; "
             "list {n_listing} rows", statuses=statuses, unpublished=unpublished['unpublished'], age_new=age_new,
             expired=expired, reasons=reasons, queued_without_pending=dispatch['queued_without_pending'],
             age_sent=age_sent, n_listing=len(listing)))
    assert statuses == {"queued": 2, "running": 1, "failed": 1}, t(
        "wrong status counts: {statuses}", statuses=statuses)
    low, high = age_bounds(waiting, before, after)
    assert int(unpublished["unpublished"]) == 1 and age_new is not None and low <= age_new <= high, t(
        "expected 1 unpublished event about 42 s old ({low:.3f}…{high:.3f}), got {unpublished} / {age_new}", low=low,
        high=high, unpublished=unpublished['unpublished'], age_new=age_new)
    assert expired == 1, t("expected 1 expired lease, got {expired}", expired=expired)
    assert reasons == {"attempts_exhausted": 1}, t("wrong failure reasons: {reasons}", reasons=reasons)
    low, high = age_bounds(dispatched, before, after)
    assert int(dispatch["queued_without_pending"]) == 1 and age_sent is not None and low <= age_sent <= high, t(
        "expected 1 queued job without pending, about 75 s ({low:.3f}…{high:.3f}), got {queued_without_pending} / "
        "{age_sent}", low=low, high=high, queued_without_pending=dispatch['queued_without_pending'], age_sent=age_sent)
    assert listing == [ids["q_sent"], ids["q_new"], ids["running"]], t(
        "the last query must list queued/running jobs by created_at")


# ---------------------------------------------------------------- 16.10

def check_two_deliveries(c) -> None:
    stack = Shared.get_stack()
    job = stack.state_store.submit_snapshot(stack.product(4))
    event = pending_of(job)[0]["id"]
    helper = Row(None, stack)
    GATE.hold(job)
    try:
        # Delivery 1 of the event: the confirm write is lost, so the event stays unsent.
        with confirm_lost(event):
            for sent in (1, 2):
                stack.publish_once()  # the lost confirm may make it raise: that is the drill
                wait_until(lambda sent=sent: GATE.holds(job) or len(ended(job)) >= sent, 60,
                           t("the delivery to claim (hold its write) or end"), interval=0.05)
                if GATE.holds(job):
                    break
                # It ended without a claim.  Only a claim the database refused is the system's to repeat:
                # the unconfirmed event goes out again once the publisher's claim runs out (moved).
                reason = unclaimed_reason(job, {"task_id": event, "end": ended(job)[-1]})
                assert sent == 1, reason
                c.note(t("the unconfirmed event is sent again: ") + reason)
                advance(job, claim_seconds_left(job) + 0.001)
        assert GATE.holds(job), t("the worker never claimed the job")
        token_a = job_row(job)["lease_token"]
        # The first execution is slow: its lease runs out while it writes, recovery requeues the job and
        # the unmarked event goes out again once the publisher's claim is over (all moved, not waited).
        advance(job, seconds_until(job, "lease_until") + 0.001)
        scan_until(stack, job, ("queued",))
        advance(job, max(seconds_until(job, "next_attempt_at"), claim_seconds_left(job)) + 0.001)
        final = settle(helper, job)
    finally:
        GATE.release(job)
    stack.drain()
    starts = deliveries(job)
    lines = job_phase_lines(stack, job, len(starts))  # the held delivery too, once released
    for line in lines[:8]:
        c.note("  " + json.dumps({k: line.get(k) for k in line if k != "event"}, ensure_ascii=False)[:200])
    claims = [p for p in lines if p.get("lease_token")]
    tokens = list(dict.fromkeys(str(p["lease_token"]) for p in claims))
    messages = {p.get("message_id") for p in claims}
    c.note(t("{n_starts} deliveries (message ids {value}); tokens in the logs {value2}; the database result_ref "
             "belongs to token {lease_token}", n_starts=len(starts), value2=[short(x) for x in tokens],
             value=sorted({short(s['task_id']) for s in starts}), lease_token=short(final['lease_token'])))
    delivered = {d["task_id"] for d in starts}
    again = [d for d in starts if d["task_id"] == event]
    assert len(tokens) >= 2, t("the logs must show two different lease_tokens (two claims)")
    assert len(again) >= 2, t("the unconfirmed event should arrive twice, got {n_again}", n_again=len(again))
    assert messages <= delivered, t("the logged message_id {map} is not a message id the worker received",
                                    map=sorted(map(str, messages - delivered)))
    for line in helper.notes:
        c.note(line)

    def outcome(token: str):
        values = [p.get(k) for p in claims if str(p["lease_token"]) == token
                  for k in ("success", "published") if isinstance(p.get(k), bool)]
        return values[-1] if values else None

    old, new = outcome(str(token_a)), outcome(str(final["lease_token"]))
    c.note(t("old token {token_a}'s outcome line: success={old}; the new token's: success={new}", old=old, new=new,
             token_a=short(token_a)))
    assert str(final["lease_token"]) != str(token_a), t("the final result must belong to the new token")
    assert old is False, t("the old token's completion line must report no publish (finish returned False): log "
                           "finish's real return value")
    assert new is True, t("the new token's completion line must report the publish")
    now = job_row(job)
    sha, where = artifact_evidence(now)
    assert now["lease_token"] == final["lease_token"] and str(token_a) not in where, t(
        "result_ref must be the new token's file; the old run's file stays unreferenced")
    c.note(t("the one result_ref: {where} (sha256 {sha}…, content == payload)", where=where, sha=sha[:10]))


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    run(checks(), setup=lambda: Shared.prepare(ROWS_FOR, NEEDS_STACK), teardown=Shared.stop)
