"""Lesson 16's failure-matrix drills, rows 9-15 (kit module, not a lesson file): what enters the queue and
what is sent again, with one fault each — the capacity gate nearly full, one schedule slot raced, one signal
in two minutes, a dispatch whose message is lost, a worker that fails before its claim, duplicates during
the backoff, the scanner over a job whose event is still pending.  The HTTP burst and the slot race run
whole in the probe (lab16_learner.post_burst, same_slot_race).  How a drill runs: lab16_cases.
"""

from __future__ import annotations

import json
from collections import namedtuple
from datetime import UTC, datetime
from uuid import uuid4

from lab16_fixture import (CALL_LIMIT, PROBE, QUEUES, ask, delivery_log, ended, events_of, fail_claim, learner,
                           pending_of, seconds_until)
from lab16_row import QUEUED_BUDGET, Row, age_until_requeued, settle

from shared.events import short
from shared.settings import WORK, redact
from shared.i18n import t
from shared.lesson_db import active_jobs, dispatched_unclaimed, job_event_counts, job_row, kept_db, remove_jobs, sql


Answer = namedtuple("Answer", "status text retry_after")  # one answer of the learner's submit route


def _concurrent_posts(api: bool, n: int, product_ids: list[int]) -> list[Answer]:
    """n concurrent POST /exports to the learner's route: the whole burst runs in the probe."""
    return [Answer(int(status), str(text), retry) for status, text, retry in
            ask("post_burst", api, n, product_ids, timeout=300)]


def submit_app() -> tuple[bool, str]:
    """Where the burst goes (api_db?, its name): api_db's POST /exports when the folder has one, else the
    curriculum's adapter (lab16_learner._adapter_app)."""
    if (WORK / "api_db.py").is_file():
        learner("api_db")
        if ask("api_db_has_post_exports"):
            return True, "api_db POST /exports"
    learner("admission_adapter")
    return False, "admission_adapter.accept_export"


def case_queue_full(row: Row, stack) -> None:
    api, route = submit_app()
    limit = PROBE.call("shared.lesson_db:limit_default", timeout=CALL_LIMIT)  # admit_export's default `limit`
    limit = limit if type(limit) is int and limit > 0 else 100
    fillers: list[str] = []
    try:
        with row.fault(t("the gate nearly full (limit {limit}, 2 places left), then 6 concurrent HTTP submits",
                         limit=limit)):
            room = limit - active_jobs() - 2
            row.expect(room >= 0, t("{active_jobs} active jobs already exceed the limit {limit}", limit=limit,
                                    active_jobs=active_jobs()))
            fillers = [str(uuid4()) for _ in range(room)]
            with kept_db() as cur:
                cur.executemany("INSERT INTO export_jobs (id, payload, next_attempt_at, deadline_at) VALUES "
                                "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 1 DAY), DATE_ADD(NOW(6), INTERVAL 1 DAY))",
                                [(f,) for f in fillers])
            before = job_event_counts()
            burst = _concurrent_posts(api, 6, row.products())
            accepted = [json.loads(a.text)["job_id"] for a in burst if a.status == 202]
            refused = [a for a in burst if a.status == 503]
            lock_refused = len(refused) - 4  # beyond the four the full gate refuses
            codes = sorted(a.status for a in burst)
            row.expect(len(accepted) + len(refused) == 6, t(
                "concurrent submits may only answer 202 or 503, got {codes}", codes=codes))
            row.expect(len(accepted) <= 2, t("{n_accepted} answers were 202 with only 2 places left: a false 202",
                                             n_accepted=len(accepted)))
            # A submit waiting behind the others at the gate may be refused by the database's lock wait
            # (innodb_lock_wait_timeout) — a 503 that wrote nothing, as correct as a capacity 503.  So the
            # places still free are filled one request at a time: each is a 202 until the gate is full,
            # and the next one is a 503.
            top_up = []
            while len(top_up) <= 2:
                answer = _concurrent_posts(api, 1, row.products())[0]
                top_up.append(answer.status)
                if answer.status != 202:
                    refused.append(answer)
                    break
                accepted.append(json.loads(answer.text)["job_id"])
            row.note(t("{route}: 6 concurrent submits → {codes}; then one at a time → {top_up}; active jobs "
                       "{active_jobs}/{limit}", route=route, codes=codes, top_up=top_up, active_jobs=active_jobs(),
                       limit=limit))
            row.expect(len(accepted) == 2 and top_up[-1] == 503,
                       t("exactly two submits (the places left) must be accepted, then 503; accepted {n_accepted}, "
                         "one at a time {top_up}", n_accepted=len(accepted), top_up=top_up))
            row.expect(all(r.retry_after for r in refused), t("a 503 must carry Retry-After"))
            row.expect(job_event_counts() == (before[0] + 2, before[1] + 2) and active_jobs() == limit,
                       t("only the two accepted requests left a job and an event"))
            for job in accepted:
                row.job(job)
                row.expect(len(events_of(job)) == 1, t("every 202 has its job and event"))
            if lock_refused > 0:
                row.note(t("{lock_refused} concurrent submit(s) were refused while waiting at the gate (503, nothing "
                           "written); the places left were then filled one at a time", lock_refused=lock_refused))
    finally:
        remove_jobs(fillers)
    row.recover_by_settling()


def case_same_slot(row: Row, stack) -> None:
    learner("schedule_store")  # an import that fails is said as such
    slot = f"lab16:{uuid4()}:same-slot"
    results: list = [None] * 4
    refusals: list[str] = []
    errors: list[str] = []

    with row.fault(t("four threads call schedule_once for one new slot at once")):
        # The four threads, released together, run in the probe next to the learner's code.
        calls = ask("same_slot_race", slot, row.products(), 4, 180, timeout=400)
        for i, call in enumerate(calls):
            if "value" in call:
                results[i] = call["value"]
            elif call.get("database"):
                # The database refused this caller (a lock wait behind the others ran out): its transaction
                # rolled back.  Whether anything was written is judged below from the rows, not from this.
                refusals.append(f"{call['raised']}({call['code']})")
            elif "raised" in call:
                errors.append(f"{call['raised']}: {redact(str(call['message']))[:160]}")
        row.expect(not any(call.get("alive") for call in calls), t("a schedule_once call never returned"))
        made = [r for r in results if r]
        shown = [short(r) if r else None for r in results]
        if refusals:
            row.note(t("schedule_once × 4 → {shown}; refused by the database: {refusals}", shown=shown,
                       refusals=refusals))
        else:
            row.note(t("schedule_once × 4 → {shown}", shown=shown))
        row.expect(not errors, t("a call failed: {errors}", errors=errors[:1]))
        row.expect(len(made) == 1, t("one slot must create one job, got {n_made}", n_made=len(made)))
        job = row.job(made[0])
        slots = sql("SELECT job_id FROM export_schedule_slots WHERE slot_key=%s", (slot,))
        row.expect(len(slots) == 1 and slots[0]["job_id"] == job and len(events_of(job)) == 1,
                   t("there must be one slot, one job and one event"))
    row.recover_by_settling()


def case_cross_minute(row: Row, stack) -> None:
    schedule = learner("schedule_store")
    tasks = learner("schedule_tasks")
    prefix = f"lab16:{uuid4()}:"
    t1 = datetime(2026, 1, 1, 10, 0, 59, tzinfo=UTC)
    t2 = datetime(2026, 1, 1, 10, 1, 1, tzinfo=UTC)
    with row.fault(t("the same simulated signal handled in two execution minutes, 10:00:59 and 10:01:01")):
        slot1, slot2 = prefix + tasks.execution_slot(t1), prefix + tasks.execution_slot(t2)
        first = schedule.schedule_once(slot1, row.products())
        again = schedule.schedule_once(slot1, row.products())
        later = schedule.schedule_once(slot2, row.products())
        row.note(t("{slot1} → {first}; same slot again → {again}; {slot2} → {later}", slot1=slot1[len(prefix):],
                   first=first and short(first), again=again, slot2=slot2[len(prefix):], later=later and short(later)))
        row.expect(first and again is None, t("the same slot must return None the second time"))
        row.expect(later and later != first and slot1 != slot2,
                   t("the same signal a minute later must land in a new slot with a new job (this model's boundary), "
                     "got slots {slot1} and {slot2}: the slot name in schedule_tasks.py must carry the minute of "
                     "execution (%Y%m%dT%H%M)", slot1=slot1[len(prefix):], slot2=slot2[len(prefix):]))
        row.job(first)
        row.job(later)
        slots = sql("SELECT slot_key FROM export_schedule_slots WHERE slot_key LIKE %s", (prefix + "%",))
        row.expect(len(slots) == 2, t("there must be two slots"))
    row.recover_by_settling()
    row.extra["boundary"] = "two slots, two jobs: execution-minute merging, not exactly-once per signal"


def case_sent_unclaimed(row: Row, stack) -> None:
    job = row.submit()
    with row.fault(t("the publisher confirmed the send but the message is lost (marked sent, never sent)")):
        row.lost_messages.update(e["id"] for e in pending_of(job))
        dispatched_unclaimed(job)
        row.observe("queued+sent (message lost)")
    row.recover()
    age = age_until_requeued(row, job)
    queued = job_row(job)
    for _ in range(2):
        stack.scan()
    pending = pending_of(job)
    row.note(t("{age:.0f}s after the dispatch the scan made a new event; 2 more scans: still {n_pending} pending; "
               "attempts {attempts}", age=age, n_pending=len(pending), attempts=queued['attempts']))
    row.expect(queued["status"] == "queued" and queued["attempts"] == 0, t("re-dispatching must not raise attempts"))
    row.expect(len(pending) == 1, t("scans must not add events while one is pending"))
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, t("only the real claim makes attempts 1"))
    row.extra["budget_seconds"] = QUEUED_BUDGET
    row.extra["unclaimed_age_seconds"] = round(age, 3)


def case_fail_before_claim(row: Row, stack) -> None:
    job = row.submit()
    fail_claim(job)
    with row.fault(t("the worker's database connection fails before claim (once)")):
        stack.pump()
        stack.wait_ended(job, 1)
        now = job_row(job)
        end = delivery_log(job)[0]["end"]
        row.note(t("the delivery ended {state} ({error_type}); job {status}, attempts {attempts}, pending events "
                   "{n_pending_of}", state=end.get('state'), error_type=end.get('error_type'), status=now['status'],
                   attempts=now['attempts'], n_pending_of=len(pending_of(job))))
        row.expect(now["status"] == "queued" and now["attempts"] == 0, t(
            "a failure before claim leaves the job queued with attempts 0"))
    row.recover()
    age_until_requeued(row, job)
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, t("the first real claim after recovery has attempts 1"))
    row.extra["budget_seconds"] = QUEUED_BUDGET


def case_backoff_duplicates(row: Row, stack) -> None:
    job = row.submit()
    # A durable backoff, as a failed attempt would leave it.
    sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 10 SECOND) WHERE id=%s", (job,))
    queue = sql("SELECT queue_name FROM export_outbox WHERE job_id=%s LIMIT 1", (job,))
    queue = (queue and queue[0].get("queue_name")) or QUEUES[1]
    with row.fault(t("two duplicate messages and two direct claims while next_attempt_at is 10 s ahead")):
        ask("send_duplicates", job, queue, 2)  # app.send_task with the learner's app, in the probe
        stack.wait_ended(job, 2)
        direct = [stack.state_store.claim(job), stack.state_store.claim(job)]
        now = job_row(job)
        answers = [e["retval"].get("claimed") if isinstance(e.get("retval"), dict) else e.get("retval")
                   for e in ended(job)]
        row.note(t("2 duplicate messages → claimed={answers}; direct claims → {direct}; attempts {attempts}",
                   answers=answers, direct=direct, attempts=now['attempts']))
        row.expect(direct == [None, None] and now["attempts"] == 0 and now["status"] == "queued",
                   t("duplicates and claims during the backoff must neither claim nor raise attempts"))
    row.recover()
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
    final = settle(row, job)
    row.expect(final["attempts"] == 1, t("the first claim after the backoff has attempts 1"))
    row.recovered()


def case_pending_rescan(row: Row, stack) -> None:
    job = row.submit()
    with row.fault(t("the publisher is down: the queued job's only pending event is 65 s old; the scanner runs 3 "
                     "times")):
        row.advance(job, 65)
        for _ in range(3):
            stack.scan()
        events = events_of(job)
        now = job_row(job)
        row.note(t("after 3 scans: {n_events} events ({n_pending_of} pending), attempts {attempts}",
                   n_events=len(events), n_pending_of=len(pending_of(job)), attempts=now['attempts']))
        row.expect(len(events) == 1 and events[0]["sent_at"] is None,
                   t("the scanner must not add a recovery event while one is pending"))
        row.expect(now["status"] == "queued" and now["attempts"] == 0, t("the job must stay queued with attempts 0"))
    row.recover_by_settling()
