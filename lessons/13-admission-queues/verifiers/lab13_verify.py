"""Verifier for lesson 13: a capacity gate in front of submit, and short and long jobs on separate queues.

Limit L below is the configured one: the default of admit_export's `limit` parameter (the value every
path that calls admit_export(cur) uses; the course's default is 100).

13.1  Leftover rows (queued, running, some without any outbox event) fill L-1 places; two failed jobs
      beside them hold none.  Three producer processes submit at once; a kit trigger holds the first INSERT
      (the kit's user lock) until all three have reached the database — with the gate the other two wait for
      the gate row, without it all three have counted L-1.  Exactly one is admitted, queued+running == L.
      Then, no trigger, 3 processes × 4 submits at L-3: exactly 3 admitted, the rest CapacityExceeded,
      queued+running == L.  A refusal while queued+running < L: the count took in jobs that hold no place
13.2  Submits of 1, 30, 31 and 60 products: the events say exports.fast, exports.fast, exports.bulk,
      exports.bulk; publish_one sends them; fast@ consumes exactly the first two and bulk@ the last two
      (judged: who consumed each message, as the probe recorded; the jobs' end states are shown)
13.3  The HTTP submit (api_db.py POST /exports, or the kit's route around accept_export): at L-1 a POST
      is 202 with a job id that has its job row and event; at L a 503 with Retry-After: 5, no job id,
      no new job or event row
13.4  Both workers paused (SIGSTOP); a leftover running job an hour old; up to 6 short jobs and 1 long
      one aged 70…10 s (created_at moved back by UPDATE).  The course's backlog queries show them; the
      publisher sends every event while the workers are paused (a publisher only sends); resumed, the
      fast worker's first job is held while it writes (the probe): it is the oldest, so the queued
      group's oldest age has fallen while the others provably still wait.  Released, the queue drains;
      the leftover running row still shows in its own group
13.5  Two long jobs go to the bulk worker, resumed once the publisher has confirmed them; the first one
      it takes is held while writing: bulk is busy.  A short job, confirmed, then the fast worker
      resumed: the job completes on fast@ while the long job is still held (no "release", still running)
13.6  exercise, with EXPORT_ADMISSION_LIMIT=5 for every process the kit starts (or 5 in the code):
      admit_export's default is 5; two producers from empty, 4 submits each (2 each, then 2 each at
      once with the first INSERT held, so the last place is raced for: past 5 without turns taken at
      the gate is the gate's fault, with turns taken the count's or the limit's) admit exactly 5; at 5
      admit_export(cur), the HTTP submit and python submit_db_export.py all refuse, and one place freed
      lets the HTTP submit in again; two producers at the edge (4 rows, one running) admit exactly one.
      SKIP when nothing refuses below 100 (the limit was not lowered)
13.7  claim(job_id) of one known job, in a helper process, while a kit transaction holds what the
      publisher's confirm holds (its UPDATE of sent_at share-locks the job row, the foreign-key check):
      it must wait for the lock (LOCK WAIT on the server) and, once the kit lets go, return the job
      (running, attempts 1).  None while the row is locked is the SKIP LOCKED race that leaves a job
      queued for good

Races are forced, never hoped for: the kit holds a lock until the server shows every helper waiting
for it (or finished), then lets go; the helpers (lab13_tools.py) let the learner's sessions wait as long
as the kit holds.  Where a check needs a job to complete (13.4, 13.5) the workers stay paused until the
publisher has confirmed its event, so no claim meets the confirm's lock; that race is 13.7's, on purpose.

The checker starts its own two workers (lab13_fixture.workers, -Q exports.fast / exports.bulk) when a
check first needs them and stops them by PID; it never prints credentials.  Every check starts from a
clean backlog (lab13_fixture.reset).  lab13_gate.py holds the races, lab13_figures.py the timelines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from lab13_figures import admission_steps, isolation_lanes
from lab13_fixture import (GATE, TERMINAL, add_filler, age_jobs, backlog, body_of, configured_limit, event_of,
                           first_held, http_app, learner, oldest_queued, pause, publisher_loop, recorded, reset, serve,
                           show, starts, stop_workers, store, stuck_reason, submit_quietly, tool, wait_confirmed,
                           wait_done, waits_elsewhere, workers)
from lab13_gate import (Helpers, assert_no_errors, claim_once_more, claim_while_confirm_holds, classify,
                        describe_claim, near_edge, outcome_text, race_now, took_turns)
from lab13_tools import WAIT_TIMEOUTS  # errors that end a wait by time, not by what the statement found

from shared.settings import WORK
from shared.figures import attach
from shared.i18n import listed, t
from shared.lesson_db import active_jobs, job_event_counts, job_row, server_now, sql
from shared.proc import WaitTimeout, run_python, wait_until
from shared.tap import Check, run

# 13.1–13.5 and 13.7 check the configured default; 13.6 sets the experiment's value for its own processes only.
os.environ.pop("EXPORT_ADMISSION_LIMIT", None)


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the box's Redis and MariaDB and the probe
    (state_store.py, publisher.py, admission_adapter.py load there)."""
    return [
        Check("13.1", check_concurrent_limit, "probe; lab13_tools.py submitters in processes at once"),
        Check("13.2", check_routing, "probe; fast@ and bulk@ workers; the publisher loop"),
        Check("13.3", check_http_503, "probe; uvicorn (api_db:app or the kit's route)"),
        Check("13.4", check_backlog, "probe; workers held at the gate; the publisher loop"),
        Check("13.5", check_fast_isolated, "probe; bulk@ held busy, fast@ free"),
        Check("13.6", check_exercise, "probe; uvicorn"),
        Check("13.7", check_claim_waits, "probe; a lab13_tools.py claimer; a kit transaction holding the row"),
    ]


# ---------------------------------------------------------------- 13.1

def check_concurrent_limit(c) -> None:
    store()
    limit = configured_limit()
    assert limit >= 4, t("the configured limit {limit} is too small for this item (at least 4; the exercise's 5 is "
                         "13.6)", limit=limit)
    running, bare = max(1, (limit - 1) // 4), max(1, (limit - 1) // 4)
    since = server_now()  # for the figure: the rows this check makes
    producers = Helpers("produce", ["P1", "P2", "P3"])
    try:
        race = near_edge(c, producers, limit, running=running, bare=bare)
        c.note(t("limit L={limit} (admit_export's default); {limit2} rows already hold places ({running} running, "
                 "{bare} without any outbox event)", limit=limit, limit2=limit - 1, running=running, bare=bare))
        c.note(t("3 processes submit at once, the first INSERT held: {insert} waiting inside the INSERT, {waiting} "
                 "waiting for a lock in {statements}", insert=race['seen']['insert'], waiting=race['seen']['waiting'],
                 statements=t('; ').join(race['seen']['statements']) or t('(none)')))
        c.note(t("released → {outcome}; queued+running = {active}", outcome=outcome_text(race), active=race['active']))
        took = took_turns(race["seen"])
        assert race["active"] <= limit or took, t("queued+running reached {active}, past the limit {limit}: with one "
                                                  "place left, {n_ok} concurrent submits were all admitted. Lock "
                                                  "export_admission_gate id=1 with SELECT … FOR UPDATE first, then "
                                                  "count and insert, in the same transaction",
                                                  active=race['active'], limit=limit, n_ok=len(race['ok']))
        # Turns were taken and exactly one got in too many: the count was right, the comparison let the
        # count equal to the limit through (with the running jobs left out, every submit would get in).
        assert race["active"] != limit + 1, t("queued+running reached {active}, past the limit {limit}: the submits "
                                              "took turns at the gate and the count was right, but the last place "
                                              "was given out twice: with {limit} already in, the service is full — "
                                              "refuse when count >= limit (a place is free only while count < limit)",
                                              active=race['active'], limit=limit)
        assert race["active"] <= limit, t("queued+running reached {active}, past the limit {limit}: the submits took "
                                          "turns at the gate, yet the count let them in. Count status IN "
                                          "('queued','running'): a running job holds a place too", limit=limit,
                                          active=race['active'])
        assert_no_errors(race)
        refused_below_limit(race, limit)
        assert len(race["ok"]) == 1, t("with one place left exactly 1 submit must be admitted, got {n_ok} (do "
                                       "running rows and old rows without an event count?)", n_ok=len(race['ok']))

        burst = near_edge(c, producers, limit, running=running, bare=bare, free=3)
        active = burst["active"]
        c.note(t("no trigger, 3 places left: 3 processes × 4 submits → {outcome}; queued+running = {active}",
                 outcome=outcome_text(burst), active=active))
        assert active <= limit, t("queued+running reached {active}, past the limit {limit}", active=active,
                                  limit=limit)
        assert_no_errors(burst)
        refused_below_limit(burst, limit)
        assert len(burst["ok"]) == 3, t("3 places left must admit exactly 3 submits, got {n_ok}",
                                        n_ok=len(burst['ok']))
    finally:
        attach(c, lambda: admission_steps(since, limit))  # pass or fail, before the rows are retired
        producers.stop()
        reset()


def refused_below_limit(outcome: dict, limit: int) -> None:
    """Submits refused although places were left: the count took in jobs that hold none."""
    assert not (outcome["capacity"] and outcome["active"] < limit), t(
        "{n} submits got CapacityExceeded while queued+running was {active}, below the limit {limit}: a place was "
        "free. Count only status IN ('queued','running') (a failed, cancelled or succeeded job holds no place), and "
        "refuse only when that count >= limit", n=outcome["capacity"], active=outcome["active"], limit=limit)


# ---------------------------------------------------------------- 13.2

def check_routing(c) -> None:
    store()
    learner.module("publisher", "claim_event", "publish_one")
    reset()
    procs = workers()
    cases = [(1, "exports.fast"), (30, "exports.fast"), (31, "exports.bulk"), (60, "exports.bulk")]
    jobs = []
    for size, queue in cases:
        job = submit_quietly(list(range(1, size + 1)))
        event = event_of(job)
        assert event is not None, t("the {size}-product job has no outbox event", size=size)
        jobs.append((job, size, queue, event))
    c.note(t("submits of 1, 30, 31, 60 products → event queue_name: {value}",
             value=t(', ').join((e['queue_name'] for *_, e in jobs))))
    for _, size, queue, event in jobs:
        assert event["queue_name"] == queue, t("the {size}-product event has queue_name={queue_name}, expected "
                                               "{queue} (≤ 30 rows: exports.fast, more: exports.bulk)", size=size,
                                               queue_name=event['queue_name'], queue=queue)
    # Judged: who consumed each message.  Waiting for each delivery's end (not for the job's success)
    # keeps the verdict off the claim race of 13.7: a claim that skipped a locked row was still consumed here.
    with publisher_loop():
        try:
            wait_until(lambda: all(recorded(kind="end", task_id=e["id"]) for *_, e in jobs), 30,
                       "every message to be consumed", interval=0.05)
        except WaitTimeout:
            job, size = next((j, n) for j, n, _, e in jobs if not recorded(kind="end", task_id=e["id"]))
            raise AssertionError(t("no worker ran the {size}-product job's message to its end within 30 s: "
                                   "{stuck_reason}", size=size, stuck_reason=stuck_reason(job))) from None
    rows = {job: job_row(job) for job, *_ in jobs}
    ended = [t("{n} rows {status}", n=n, status=rows[j] and rows[j]['status']) for j, n, *_ in jobs]
    c.note(t("the jobs ended: {jobs}", jobs=listed(ended)))
    for job, size, *_ in jobs:
        if not (rows[job] and rows[job]["status"] == "succeeded"):
            c.note(f"  {size}: {stuck_reason(job)}")
    lines = []
    for job, size, queue, _ in jobs:
        seen = starts(job)
        expected = queue.split(".")[1] + "@"
        nodes = sorted({str(e.get("node")) for e in seen})
        lines.append(t("{size} rows → {nodes} ({queues})", size=size, nodes=', '.join(nodes),
                       queues=', '.join(sorted({str(e.get('queue')) for e in seen}))))
        assert seen, t("the {size}-product job's message ran to its end, but no start of it was recorded", size=size)
        wrong = [e for e in seen if not str(e.get("node")).startswith(expected) or e.get("queue") != queue]
        assert not wrong, t("the {size}-product job was consumed by {node} from {queue}; only {expected}… from "
                            "{queue2} may consume it", size=size, node=wrong[0].get('node'), expected=expected,
                            queue=wrong[0].get('queue'), queue2=queue)
    c.note(t("consumed by: {lines}", lines=listed(lines, semicolons=True)))
    c.note(t("two workers, concurrency=1 and prefetch 1 each (pid {pid} / {pid2})", pid=procs['fast'].pid,
             pid2=procs['bulk'].pid))


# ---------------------------------------------------------------- 13.3

def check_http_503(c) -> None:
    store()
    limit = configured_limit()
    app, how = http_app()
    reset()
    add_filler(limit - 1, running=max(0, (limit - 1) // 4), with_events=(limit - 1) // 2)
    with serve(app) as client:
        c.note(t("HTTP submit: {how}; limit L={limit}, {limit2} rows present", how=how, limit=limit, limit2=limit - 1))
        first = client.post("/exports", json={"product_ids": [4]})
        body = body_of(first)
        c.note(t("one place left: POST /exports → {status_code} {body}", status_code=first.status_code,
                 body=str(body)[:120]))
        assert first.status_code == 202, t("below capacity the answer must be 202, got {status_code}",
                                           status_code=first.status_code)
        job_id = body.get("job_id") if isinstance(body, dict) else None
        assert job_id and job_row(str(job_id)) and event_of(str(job_id)), t(
            "the 202 answer must carry a job_id whose job row and outbox event both exist")

        before = job_event_counts()
        full = client.post("/exports", json={"product_ids": [5]})
        after = job_event_counts()
        full_body = body_of(full)
        c.note(t("full (queued+running={active_count}): POST /exports → {status_code}, Retry-After: {get}, "
                 "{full_body}", active_count=active_jobs(), status_code=full.status_code,
                 get=full.headers.get('retry-after'), full_body=str(full_body)[:120]))
        c.note(t("jobs {before} → {after}, events {before2} → {after2}", before=before[0], after=after[0],
                 before2=before[1], after2=after[1]))
        assert full.status_code == 503, t("at capacity the answer must be 503, got {status_code}: a full service is "
                                          "503 (429 is for one user's quota)", status_code=full.status_code)
        assert full.headers.get("retry-after") == "5", t("the 503 must carry Retry-After: 5, got {get!r}",
                                                         get=full.headers.get('retry-after'))
        assert not (isinstance(full_body, dict) and full_body.get("job_id")), t("a 503 answer must not carry a job_id")
        assert after == before, t("the 503 still left a job or event row behind: check capacity before the INSERTs, "
                                  "in the same transaction")
    reset()


# ---------------------------------------------------------------- 13.4

def check_backlog(c) -> None:
    store()
    learner.module("publisher", "claim_event", "publish_one")
    limit = configured_limit()
    assert limit >= 4, t("the configured limit {limit} is too small for this item (at least 4)", limit=limit)
    short_jobs = min(6, limit - 2)  # the leftover and the long job take a place each
    reset()
    procs = workers()
    leftover = add_filler(1, running=1, age_seconds=3600)[0]
    jobs: list[str] = []
    pause(procs, signal.SIGSTOP)
    try:
        jobs = [submit_quietly([k]) for k in range(11, 11 + short_jobs)]
        jobs.append(submit_quietly(list(range(1, 41))))
        ages = [70 - 10 * k for k in range(short_jobs)] + [10]
        age_jobs(jobs, ages)
        # The fast worker's first job stays running (held writing its file): the others provably still wait.
        GATE.hold(*jobs[:short_jobs])
        before_jobs, before_outbox = backlog()
        c.note(t("workers paused (SIGSTOP); {short_jobs} short and 1 long job submitted, created_at moved {ages}…10 "
                 "s back by UPDATE; plus one running row left over from an hour ago", short_jobs=short_jobs,
                 ages=ages[0]))
        c.note(t("backlog (paused): {jobs}; unpublished: {outbox}", jobs=show(before_jobs), outbox=show(before_outbox)))
        assert before_jobs.get("queued", (0, 0))[0] == len(jobs), t(
            "{n_jobs} jobs should be queued while paused, found {queued}", n_jobs=len(jobs),
            queued=before_jobs.get('queued', (0, 0))[0])
        with publisher_loop() as publisher:
            wait_confirmed(c, jobs, publisher)
        sent_jobs, sent_outbox = backlog()
        c.note(t("workers still paused, the publisher sent every event: {jobs}; unpublished: {outbox}",
                 jobs=show(sent_jobs), outbox=show(sent_outbox)))
        start_age, oldest_before = sent_jobs["queued"][1], oldest_queued()
        pause(procs, signal.SIGCONT)
        first = first_held(jobs[:short_jobs], 30, "fast")  # a short job's first file write, held
        during_jobs, _ = backlog()
        oldest_now = oldest_queued()
        waiting = during_jobs.get("queued", (0, 0.0))
        moved = (oldest_now["created_at"] - oldest_before["created_at"]).total_seconds() if oldest_now else 0.0
        node = next((str(e.get("node")) for e in starts(first)), "?")
        c.note(t("workers resumed: {node} took the job submitted {ages} s ago first (held while writing); oldest "
                 "queued age {start_age:.1f}s → {waiting:.1f}s while {waiting2} still wait (the oldest created_at "
                 "moved {moved:.0f} s forward)", node=node, ages=ages[jobs.index(first)], start_age=start_age,
                 waiting=waiting[1], waiting2=waiting[0], moved=moved))
        GATE.release(*jobs)
        rows = wait_done(jobs, 30)
        after_jobs, after_outbox = backlog()
        c.note(t("released and drained: {jobs}; unpublished: {outbox}", jobs=show(after_jobs),
                 outbox=show(after_outbox)))
        unfinished = [j for j in jobs if not rows[j] or rows[j]["status"] != "succeeded"]
        assert not unfinished, t("{n_unfinished} jobs did not complete after the resume: {stuck_reason}",
                                 n_unfinished=len(unfinished), stuck_reason=stuck_reason(unfinished[0]))
        assert first == jobs[0] and waiting[0] >= 1 and moved > 0, t(
            "the oldest queued age did not fall while jobs still waited: the oldest job was not served first. The "
            "publisher must send the oldest event first (ORDER BY created_at, id)")
        assert after_jobs.get("running", (0, 0))[0] == 1 and after_jobs["running"][1] >= 3500, t(
            "the leftover running row should still show in the running group (it holds capacity too)")
        assert job_row(leftover)["status"] == "running"
    finally:
        pause(procs, signal.SIGCONT)
        GATE.release(*jobs)
        reset()


# ---------------------------------------------------------------- 13.5

def check_fast_isolated(c) -> None:
    store()
    learner.module("publisher", "claim_event", "publish_one")
    reset()
    procs = workers()
    bulk_jobs: list[str] = []
    fast, moments, drawn = None, {}, False  # for the figure: when the kit submitted each job
    # Each worker resumes only once the publisher has confirmed what it is to run: its claim never meets
    # the confirm's lock (that race is 13.7's), so this item judges the split queues and nothing else.
    pause(procs, signal.SIGSTOP)
    try:
        for size in (40, 50):
            bulk_jobs.append(submit_quietly(list(range(1, size + 1))))
            moments[bulk_jobs[-1]] = time.time()
        GATE.hold(*bulk_jobs)
        with publisher_loop() as publisher:
            wait_confirmed(c, bulk_jobs, publisher)
            pause({"bulk": procs["bulk"]}, signal.SIGCONT)
            busy = first_held(bulk_jobs, 30, "bulk")
            other = job_row(bulk_jobs[1 - bulk_jobs.index(busy)])["status"]
            c.note(t("2 long jobs (40, 50 rows): bulk@ runs one of them (held while writing), the other is {other}",
                     other=other))

            fast = submit_quietly([7])
            moments[fast] = moments["fast"] = time.time()
            wait_confirmed(c, [fast], publisher)
            pause({"fast": procs["fast"]}, signal.SIGCONT)
            # Done, or its message waits in a queue the fast worker never reads (then it cannot be done
            # by fast@ while bulk is held): either is known at once, without waiting out the bound.
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: (job_row(fast) or {}).get("status") in TERMINAL
                           or waits_elsewhere(fast, "exports.fast"), 30, "the short job to finish", interval=0.05)
            row = job_row(fast)
            busy_row = job_row(busy)
            # The probe ends a hold only on the kit's release file (written below) or after 5 minutes.
            still_busy = not recorded(kind="release", job=busy) and (busy_row or {}).get("status") == "running"
            seen = starts(fast)
            c.note(t("a 1-row job submitted now (the fast worker resumed once its event was confirmed) → {row}, run "
                     "by {value}; the long job still running: {still_busy}", row=row and row['status'],
                     value=', '.join(str(e.get('node')) for e in seen) or t('nobody'), still_busy=still_busy))
            attach(c, lambda: isolation_lanes(bulk_jobs, fast, moments))  # the long job still held
            drawn = True
            assert row and row["status"] == "succeeded", t(
                "the short job did not complete while the bulk worker was busy: {stuck_reason}",
                stuck_reason=stuck_reason(fast))
            assert still_busy, t("the long job ended before the short one completed: isolation not shown")
            assert seen and all(str(e.get("node")).startswith("fast@") for e in seen), t(
                "the short job must be run by the fast@ worker")
            GATE.release(*bulk_jobs)
            rows = wait_done(bulk_jobs, 30)
            c.note(t("released, the long jobs: {value}",
                     value=', '.join(str(r and r['status']) for r in rows.values())))
    finally:
        if not drawn:  # it failed earlier: what happened so far
            attach(c, lambda: isolation_lanes(bulk_jobs, fast, moments))
        pause(procs, signal.SIGCONT)
        GATE.release(*bulk_jobs)
        reset()


# ---------------------------------------------------------------- 13.6

def check_exercise(c) -> None:
    store()
    env5 = dict(os.environ, EXPORT_ADMISSION_LIMIT="5")
    default = tool(["limit"], env5).get("default")
    reset()
    producers = Helpers("produce", ["A", "B"], env=env5)
    try:
        # Two producers from empty, 4 submits each: 2 each first (4 places of 5, no count can reach the
        # limit), then 2 each at once with the first INSERT held until both reached the database.  So the
        # last place is always raced for, and the kit sees whether the two took turns at the gate.
        first = producers.results(producers.go_round(n=2, ids=[6]), 20)
        last = race_now(c, producers, 2, [6])
        fill, active = classify(first + last["results"]), active_jobs()
        c.note(t("EXPORT_ADMISSION_LIMIT=5: admit_export's default limit = {default!r}; two producers from empty, 4 "
                 "submits each (2 each, then the last 2 each at once, the first INSERT held: {insert} waiting "
                 "inside the INSERT, {waiting} waiting for a lock) → {outcome}; queued+running = {active}",
                 default=default, insert=last["seen"]["insert"], waiting=last["seen"]["waiting"],
                 outcome=outcome_text(fill), active=active))
        assert_no_errors(fill)
        if default != 5 and fill["capacity"] == 0 and fill["lock_wait"] == 0:
            c.skip(t("the limit is still above 5 (no submit was refused): exercise not attempted. Set admit_export's "
                     "default limit to 5, or read EXPORT_ADMISSION_LIMIT as the guide shows"))
        assert default == 5, t("the submit path refused at 5 but admit_export's default limit is {default!r}: "
                               "schedules and replays (lessons 14, 15) call admit_export(cur) and would keep "
                               "admitting. Define the limit once, as admit_export's default", default=default)
        # Past 5 with both inside their INSERTs: both counted 4 before either inserted (the gate); past 5
        # though they took turns: the count or the limit it is compared with.
        assert active <= 5 or took_turns(last["seen"]), t(
            "two producers pushed queued+running to {active}, past the 5 that admit_export's default says: with one "
            "place left both counted 4 and both inserted (while the kit held the first INSERT, the other submit "
            "was inside its own INSERT, not waiting for the gate). Lock the gate row with SELECT … FOR UPDATE "
            "before counting, in the submit's transaction", active=active)
        assert active <= 5, t("two producers pushed queued+running to {active}, past the 5 that admit_export's "
                              "default says: compare the count with the limit parameter, counted in the shared "
                              "database (not per process)", active=active)
        assert len(fill["ok"]) == 5, t("from empty exactly 5 submits must be admitted, got {n_ok}",
                                       n_ok=len(fill['ok']))

        direct = tool(["admit"], env5)
        c.note(t("at 5, admit_export(cur) called directly (as schedules and replays do) → {refused}",
                 refused=t('refused') if 'capacity' in direct else direct))
        assert "capacity" in direct, t("at 5 admit_export(cur) did not raise CapacityExceeded: {direct}",
                                       direct=direct)
        before = job_event_counts()
        script = run_python(["submit_db_export.py"], cwd=WORK, timeout=30, env=env5)
        after = job_event_counts()
        c.note(t("at 5, python submit_db_export.py → exit {returncode}, jobs {before} → {after}", before=before[0],
                 returncode=script.returncode, after=after[0]))
        assert script.returncode != 0 and after == before, t(
            "at 5 submit_db_export.py still admitted a job: it must go through the same admit_export")
        app, how = http_app()
        with serve(app, env=env5) as client:  # at 5; the kit finishes the oldest queued job; then twice more
            full = client.post("/exports", json={"product_ids": [8]})
            sql("UPDATE export_jobs SET status='succeeded', updated_at=NOW(6) WHERE id=%s", (oldest_queued()["id"],))
            freed = client.post("/exports", json={"product_ids": [8]})
            again = client.post("/exports", json={"product_ids": [8]})
        c.note(t("HTTP ({how}): at 5 → {status_code}; after one finished → {status_code2}; once more → {status_code3}",
                 how=how, status_code=full.status_code, status_code2=freed.status_code, status_code3=again.status_code))
        assert (full.status_code, freed.status_code, again.status_code) == (503, 202, 503), t(
            "the HTTP submit must use the same limit 5: 503 when full, 202 once a place is free, 503 when full again")

        race = near_edge(c, producers, 5, running=1, bare=1)
        c.note(t("at the edge: 4 rows (1 running), two producers at once → {outcome}; queued+running = {active}",
                 outcome=outcome_text(race), active=race['active']))
        assert race["active"] <= 5, t("two producers at once pushed queued+running to {active}, past 5: lock the "
                                      "gate row before counting", active=race['active'])
        assert_no_errors(race)
        refused_below_limit(race, 5)
        assert len(race["ok"]) == 1, t("with one place left exactly 1 must be admitted, got {n_ok}",
                                       n_ok=len(race['ok']))
    finally:
        producers.stop()
        reset()


# ---------------------------------------------------------------- 13.7

def check_claim_waits(c) -> None:
    learner.module("state_store", "submit_snapshot", "claim", "CapacityExceeded")
    reset()
    job = submit_quietly([9])
    event = event_of(job)
    assert event is not None, t("the submitted job has no outbox event")
    try:
        with Helpers("claim", ["C"], job) as claimer:
            result, waited = claim_while_confirm_holds(c, claimer, job, event["id"])
            if not waited:
                status = (job_row(job) or {}).get("status")
                c.note(t("while the row was still locked, claim(job_id) in another process → {describe_claim}; the "
                         "job is now {status}", describe_claim=describe_claim(result), status=status))
                assert result.get("code") in WAIT_TIMEOUTS, (t(
                    "while the job's row was locked for a moment (the kit held the share lock the outbox confirm's "
                    "foreign-key check takes), claim returned None without waiting, and the job is still {status}: it "
                    "skipped the locked row (FOR UPDATE SKIP LOCKED). In a real run the message is already out when "
                    "the publisher confirms (UPDATE export_outbox SET sent_at …); a worker whose claim lands in those "
                    "milliseconds leaves the job queued for good. Claim one known id with a plain FOR UPDATE: wait "
                    "for that brief lock (at most innodb_lock_wait_timeout), then judge the conditions on the latest "
                    "row; keep SKIP LOCKED for scans that may take any row (see the guide)", status=status)
                    if result.get('none') else t("while the row was locked, claim did not wait for the lock: "
                                                 "{describe_claim}", describe_claim=describe_claim(result)))
            # It waited, and its own time limit ended the wait: ask once more, the row now free.
            if result.get("code") in WAIT_TIMEOUTS:
                result = claim_once_more(c, claimer)
            assert "job" in result and result["job"]["id"] == job, t(
                "once the lock was gone claim should return this job, got {describe_claim}: {value}",
                describe_claim=describe_claim(result),
                value=t('after the wait, judge the conditions on the latest row; this job is still claimable')
                if result.get('none') else t('see above'))
            row = job_row(job)
            assert row and row["status"] == "running" and int(row["attempts"]) == 1 \
                and str(row["lease_token"]) == result["job"]["lease_token"], t(
                    "claim returned the job, but the row is {row}, attempts={row2}", row=row and row['status'],
                    row2=row and row['attempts'])
            c.note(t("the job's row: running, attempts=1, the returned lease_token"))
    finally:
        reset()


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    GATE.folder.mkdir(parents=True, exist_ok=True)
    run(checks(), teardown=stop_workers)
