"""Lesson 16's failure-matrix drills, rows 9-15 (kit module, not a lesson file): what enters the queue and
what is sent again, with one fault each — the capacity gate nearly full, one schedule slot raced, one signal
in two minutes, a dispatch whose message is lost, a worker that fails before its claim, duplicates during
the backoff, the scanner over a job whose event is still pending.  One function per row; lab16_cases lists
them and runs each (baseline → inject → recover).

Each row runs on a job of its own, created inside the row, and injects exactly one fault through
Row.fault.  The learner's code runs in the judge's probe (lab16_fixture.learner, lab16_learner.py), in
the worker and in the learner's own scripts, never in this process: the HTTP burst and the slot race run
there whole (lab16_learner.post_burst, same_slot_race).  Its verdict rests on facts: database rows, the
job's committed changes, the deliveries the worker ran and how each ended, HTTP answers.  Durable times are
moved, not waited out.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import uuid4

from lab16_fixture import (QUEUES, active_jobs, ask, counts, delivery_log, ended, events_of, fail_claim, learner,
                           pending_of, seconds_until)
from lab16_row import QUEUED_BUDGET, Row, age_until_requeued, settle

from shared.celerylab import WORK, redact, short
from shared.i18n import t
from shared.labdb import job_row, kept_db, remove_jobs, sql


def capacity_limit() -> int:
    """The default of the learner's admit_export `limit` (its signature, read in the probe), else 100."""
    value = ask("limit_default")
    return value if type(value) is int and value > 0 else 100


class Posted:
    """One answer of the learner's submit route, as the probe saw it."""

    def __init__(self, status: int, text: str, retry_after: str | None):
        self.status_code, self.text = int(status), str(text)
        self.headers = {"retry-after": retry_after} if retry_after is not None else {}

    def json(self):
        return json.loads(self.text)


def _concurrent_posts(api: bool, n: int, product_ids: list[int]) -> list[Posted]:
    """n concurrent POST /exports to the learner's route: the whole burst runs in the probe."""
    return [Posted(*answer) for answer in ask("post_burst", api, n, product_ids, timeout=300)]


def submit_app() -> tuple[bool, str]:
    """The learner's HTTP submit: api_db's POST /exports when the folder has one, else accept_export
    behind a minimal route (the curriculum's adapter), answering 202 like the lesson's API.  (Whether
    api_db serves it, and which route it is.)"""
    if (WORK / "api_db.py").is_file():
        learner("api_db")
        if ask("api_db_has_post_exports"):
            return True, "api_db POST /exports"
    learner("admission_adapter")
    return False, "admission_adapter.accept_export"


def case_queue_full(row: Row, lab) -> None:
    api, route = submit_app()
    limit = capacity_limit()
    fillers: list[str] = []
    try:
        with row.fault(t(f"容量门闩几乎占满（上限 {limit}，只剩 2 个空位）后 6 个并发 HTTP 提交",
                         f"the gate nearly full (limit {limit}, 2 places left), then 6 concurrent HTTP submits")):
            room = limit - active_jobs() - 2
            row.expect(room >= 0, f"已有 {active_jobs()} 个活动任务，超过上限 {limit}",
                       f"{active_jobs()} active jobs already exceed the limit {limit}")
            fillers = [str(uuid4()) for _ in range(room)]
            with kept_db() as cur:
                cur.executemany("INSERT INTO export_jobs (id, payload, next_attempt_at, deadline_at) VALUES "
                                "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 1 DAY), DATE_ADD(NOW(6), INTERVAL 1 DAY))",
                                [(f,) for f in fillers])
            before = counts()
            burst = _concurrent_posts(api, 6, row.products())
            accepted = [a.json()["job_id"] for a in burst if a.status_code == 202]
            refused = [a for a in burst if a.status_code == 503]
            lock_refused = len(refused) - 4  # beyond the four the full gate refuses
            codes = sorted(a.status_code for a in burst)
            row.expect(len(accepted) + len(refused) == 6, f"并发提交只能得到 202 或 503，实际 {codes}",
                       f"concurrent submits may only answer 202 or 503, got {codes}")
            row.expect(len(accepted) <= 2, f"只剩 2 个空位却有 {len(accepted)} 个 202：虚假受理",
                       f"{len(accepted)} answers were 202 with only 2 places left: a false 202")
            # A submit waiting behind the others at the gate may be refused by the database's lock wait
            # (innodb_lock_wait_timeout) — a 503 that wrote nothing, as correct as a capacity 503.  So the
            # places still free are filled one request at a time: each is a 202 until the gate is full,
            # and the next one is a 503.
            top_up = []
            while len(top_up) <= 2:
                answer = _concurrent_posts(api, 1, row.products())[0]
                top_up.append(answer.status_code)
                if answer.status_code != 202:
                    refused.append(answer)
                    break
                accepted.append(answer.json()["job_id"])
            row.note(t(f"{route}：6 个并发提交 → {codes}；随后逐个提交 → {top_up}；活动任务 {active_jobs()}/{limit}",
                       f"{route}: 6 concurrent submits → {codes}; then one at a time → {top_up}; active jobs "
                       f"{active_jobs()}/{limit}"))
            row.expect(len(accepted) == 2 and top_up[-1] == 503,
                       f"应恰好受理 2 个（空位数），之后是 503；实际受理 {len(accepted)} 个，逐个提交 {top_up}",
                       f"exactly two submits (the places left) must be accepted, then 503; accepted "
                       f"{len(accepted)}, one at a time {top_up}")
            row.expect(all(r.headers.get("retry-after") for r in refused), "503 应带 Retry-After",
                       "a 503 must carry Retry-After")
            row.expect(counts() == (before[0] + 2, before[1] + 2) and active_jobs() == limit,
                       "只有被受理的 2 个请求留下任务与事件", "only the two accepted requests left a job and an event")
            for job in accepted:
                row.job(job)
                row.expect(len(events_of(job)) == 1, "每个 202 都对应一条任务和一个事件", "every 202 has its job and event")
            if lock_refused > 0:
                row.note(t(f"并发中 {lock_refused} 个提交在门闩前等待时被拒绝（503，未写入任何行），空位随后逐个填满",
                           f"{lock_refused} concurrent submit(s) were refused while waiting at the gate (503, nothing "
                           "written); the places left were then filled one at a time"))
    finally:
        remove_jobs(fillers)
    row.recover()
    for job in row.jobs:
        settle(row, job)
    row.recovered()


def case_same_slot(row: Row, lab) -> None:
    learner("schedule_store")  # an import that fails is said as such
    slot = f"lab16:{uuid4()}:same-slot"
    results: list = [None] * 4
    refusals: list[str] = []
    errors: list[str] = []

    with row.fault(t("4 个线程同时对同一个新 slot 调用 schedule_once", "four threads call schedule_once for one new slot at once")):
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
        row.expect(not any(call.get("alive") for call in calls), "schedule_once 调用没有返回",
                   "a schedule_once call never returned")
        made = [r for r in results if r]
        row.note(t(f"schedule_once × 4 → {[short(r) if r else None for r in results]}"
                   + (f"；数据库拒绝 {refusals}" if refusals else ""),
                   f"schedule_once × 4 → {[short(r) if r else None for r in results]}"
                   + (f"; refused by the database: {refusals}" if refusals else "")))
        row.expect(not errors, f"调用出错：{errors[:1]}", f"a call failed: {errors[:1]}")
        row.expect(len(made) == 1, f"同一 slot 应只创建 1 个任务，实际 {len(made)}",
                   f"one slot must create one job, got {len(made)}")
        job = row.job(made[0])
        slots = sql("SELECT job_id FROM export_schedule_slots WHERE slot_key=%s", (slot,))
        row.expect(len(slots) == 1 and slots[0]["job_id"] == job and len(events_of(job)) == 1,
                   "应有 1 个槽、1 个任务、1 个事件", "there must be one slot, one job and one event")
    row.recover()
    settle(row, job)
    row.recovered()


def case_cross_minute(row: Row, lab) -> None:
    schedule = learner("schedule_store")
    tasks = learner("schedule_tasks")
    prefix = f"lab16:{uuid4()}:"
    t1 = datetime(2026, 1, 1, 10, 0, 59, tzinfo=UTC)
    t2 = datetime(2026, 1, 1, 10, 1, 1, tzinfo=UTC)
    with row.fault(t("同一个模拟信号在 10:00:59 与 10:01:01 两个执行分钟各处理一次",
                     "the same simulated signal handled in two execution minutes, 10:00:59 and 10:01:01")):
        slot1, slot2 = prefix + tasks.execution_slot(t1), prefix + tasks.execution_slot(t2)
        first = schedule.schedule_once(slot1, row.products())
        again = schedule.schedule_once(slot1, row.products())
        later = schedule.schedule_once(slot2, row.products())
        row.note(t(f"{slot1[len(prefix):]} → {first and short(first)}；同槽再次 → {again}；{slot2[len(prefix):]} → "
                   f"{later and short(later)}", f"{slot1[len(prefix):]} → {first and short(first)}; same slot again → "
                   f"{again}; {slot2[len(prefix):]} → {later and short(later)}"))
        row.expect(first and again is None, "同一槽第二次应返回 None", "the same slot must return None the second time")
        row.expect(later and later != first and slot1 != slot2,
                   f"下一分钟的同一信号应落入新槽并新建任务（当前模型的边界），实际槽 {slot1[len(prefix):]} 与 "
                   f"{slot2[len(prefix):]}：schedule_tasks.py 的槽名要包含执行的分钟（%Y%m%dT%H%M）",
                   f"the same signal a minute later must land in a new slot with a new job (this model's boundary), "
                   f"got slots {slot1[len(prefix):]} and {slot2[len(prefix):]}: the slot name in schedule_tasks.py "
                   "must carry the minute of execution (%Y%m%dT%H%M)")
        row.job(first)
        row.job(later)
        slots = sql("SELECT slot_key FROM export_schedule_slots WHERE slot_key LIKE %s", (prefix + "%",))
        row.expect(len(slots) == 2, "应有两个槽", "there must be two slots")
    row.recover()
    for job in row.jobs:
        settle(row, job)
    row.recovered()
    row.extra["boundary"] = "two slots, two jobs: execution-minute merging, not exactly-once per signal"


def case_sent_unclaimed(row: Row, lab) -> None:
    job = row.submit()
    with row.fault(t("publisher 已确认发送，但消息丢失（标记 sent，不真正发送）",
                     "the publisher confirmed the send but the message is lost (marked sent, never sent)")):
        row.lost_messages.update(e["id"] for e in pending_of(job))
        with kept_db() as cur:
            cur.execute("UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE job_id=%s AND sent_at IS NULL",
                        (job,))
            cur.execute("UPDATE export_jobs SET last_dispatched_at=NOW(6) WHERE id=%s", (job,))
        row.observe("queued+sent (message lost)")
    row.recover()
    age = age_until_requeued(row, job)
    queued = job_row(job)
    for _ in range(2):
        lab.scan()
    pending = pending_of(job)
    row.note(t(f"派发 {age:.0f} 秒后扫描生成新事件；再扫 2 次仍是 {len(pending)} 条待发；attempts {queued['attempts']}",
               f"{age:.0f}s after the dispatch the scan made a new event; 2 more scans: still {len(pending)} pending; "
               f"attempts {queued['attempts']}"))
    row.expect(queued["status"] == "queued" and queued["attempts"] == 0, "重新派发不能增加 attempts",
               "re-dispatching must not raise attempts")
    row.expect(len(pending) == 1, "已有待发事件时扫描不能继续新增", "scans must not add events while one is pending")
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "只有真正的领取让 attempts 变为 1", "only the real claim makes attempts 1")
    row.extra["budget_seconds"] = QUEUED_BUDGET
    row.extra["unclaimed_age_seconds"] = round(age, 3)


def case_fail_before_claim(row: Row, lab) -> None:
    job = row.submit()
    fail_claim(job)
    with row.fault(t("worker 在 claim 之前连接数据库失败（一次）", "the worker's database connection fails before claim (once)")):
        lab.pump()
        lab.wait_ended(job, 1)
        now = job_row(job)
        end = delivery_log(job)[0]["end"]
        row.note(t(f"投递结束于 {end.get('state')}（{end.get('error_type')}）；任务 {now['status']}，attempts "
                   f"{now['attempts']}，待发事件 {len(pending_of(job))}",
                   f"the delivery ended {end.get('state')} ({end.get('error_type')}); job {now['status']}, attempts "
                   f"{now['attempts']}, pending events {len(pending_of(job))}"))
        row.expect(now["status"] == "queued" and now["attempts"] == 0, "claim 前失败应保持 queued、attempts 0",
                   "a failure before claim leaves the job queued with attempts 0")
    row.recover()
    age_until_requeued(row, job)
    settle(row, job, condition=lambda r: r["attempts"] >= 1)
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "恢复后的第一次真正领取 attempts 为 1", "the first real claim after recovery has attempts 1")
    row.extra["budget_seconds"] = QUEUED_BUDGET


def case_backoff_duplicates(row: Row, lab) -> None:
    job = row.submit()
    # A durable backoff, as a failed attempt would leave it.
    sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 10 SECOND) WHERE id=%s", (job,))
    queue = sql("SELECT queue_name FROM export_outbox WHERE job_id=%s LIMIT 1", (job,))
    queue = (queue and queue[0].get("queue_name")) or QUEUES[1]
    with row.fault(t("退避期内（next_attempt_at 在 10 秒后）送来 2 条重复消息，并直接 claim 两次",
                     "two duplicate messages and two direct claims while next_attempt_at is 10 s ahead")):
        ask("send_duplicates", job, queue, 2)  # app.send_task with the learner's app, in the probe
        lab.wait_ended(job, 2)
        direct = [lab.state_store.claim(job), lab.state_store.claim(job)]
        now = job_row(job)
        answers = [e["retval"].get("claimed") if isinstance(e.get("retval"), dict) else e.get("retval")
                   for e in ended(job)]
        row.note(t(f"2 条重复消息 → claimed={answers}；直接 claim → {direct}；attempts {now['attempts']}",
                   f"2 duplicate messages → claimed={answers}; direct claims → {direct}; attempts {now['attempts']}"))
        row.expect(direct == [None, None] and now["attempts"] == 0 and now["status"] == "queued",
                   "退避期内的重复消息与 claim 都不能领取或增加 attempts",
                   "duplicates and claims during the backoff must neither claim nor raise attempts")
    row.recover()
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
    final = settle(row, job)
    row.expect(final["attempts"] == 1, "退避结束后的第一次领取 attempts 为 1", "the first claim after the backoff has attempts 1")
    row.recovered()


def case_pending_rescan(row: Row, lab) -> None:
    job = row.submit()
    with row.fault(t("publisher 停着：queued 任务的唯一待发事件已过 65 秒，扫描器连跑 3 次",
                     "the publisher is down: the queued job's only pending event is 65 s old; the scanner runs 3 "
                     "times")):
        row.advance(job, 65)
        for _ in range(3):
            lab.scan()
        events = events_of(job)
        now = job_row(job)
        row.note(t(f"3 次扫描后事件数 {len(events)}（待发 {len(pending_of(job))}），attempts {now['attempts']}",
                   f"after 3 scans: {len(events)} events ({len(pending_of(job))} pending), attempts {now['attempts']}"))
        row.expect(len(events) == 1 and events[0]["sent_at"] is None,
                   "已有待发事件时扫描器不能新增恢复事件", "the scanner must not add a recovery event while one is pending")
        row.expect(now["status"] == "queued" and now["attempts"] == 0, "任务应保持 queued、attempts 0",
                   "the job must stay queued with attempts 0")
    row.recover()
    settle(row, job)
    row.recovered()
