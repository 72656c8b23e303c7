"""The 15 rows of lesson 16's failure matrix (kit module, not a lesson file), one function each, and the
runner of one row: baseline → inject → recover, into a record row (lab16_record's rules).

Each row runs on a job of its own, created inside the row, and injects exactly one fault through
Row.fault.  The learner's code runs in the judge's probe (lab16_fixture.learner, lab16_learner.py), in
the worker and in the learner's own scripts, never in this process.  Its verdict rests on facts: database rows, the job's committed changes, the deliveries the
worker ran and how each ended, HTTP answers, process ids.  Durable times are moved, not waited out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import traceback
from datetime import UTC, datetime
from uuid import uuid4

from lab16_fixture import (FAIL_LIST, HOLD_LIST, PROBE, QUEUES, RESULT_TTL, active_jobs, artifact_evidence, ask,
                           claim_seconds_left, confirm_lost, counts, dead_letters, deliveries, delivery_log,
                           drop_kit_triggers, due_events, ended, events_of, fail_claim, hold, learner,
                           outbox_insert_fails, park, pending_of, publishing, release, seconds_until, status_of)
from lab16_record import empty_row, now_iso
from lab16_row import Row, age_until_requeued, await_hold, scan_until, settle

from shared import handshake
from shared.celerylab import WORK, pid_running, redact, setting, short
from shared.i18n import t
from shared.labdb import job_row, kept_db, sql
from shared.proc import free_port, run_python, wait_until

LEASE_BUDGET = 60.0    # an expired lease is back in processing within this (lesson budget)
QUEUED_BUDGET = 90.0   # a sent-but-unclaimed job is back in processing within this


# ================================================================ the 15 cases

def case_commit_fault(row: Row, lab) -> None:
    before = counts()
    with row.fault(t("outbox INSERT 在提交前失败（套件触发器），job INSERT 已执行",
                     "the outbox INSERT fails before the commit (kit trigger), after the job INSERT")):
        raised = None
        with outbox_insert_fails():
            try:
                lab.state_store.submit_snapshot(row.products())
            except Exception as exc:  # noqa: BLE001 - any exception is what the drill expects
                raised = exc
        after = counts()
        row.observe("absent")
        row.note(t(f"submit_snapshot → {type(raised).__name__ if raised else '没有异常'}；任务 {before[0]}→{after[0]}，"
                   f"事件 {before[1]}→{after[1]}",
                   f"submit_snapshot → {type(raised).__name__ if raised else 'no exception'}; jobs {before[0]}→"
                   f"{after[0]}, events {before[1]}→{after[1]}"))
        row.expect(raised is not None, "outbox 插入失败时 submit_snapshot 没有抛异常",
                   "submit_snapshot raised nothing although the outbox insert failed")
        row.expect(after == before, "异常后留下了任务或事件：job 与 outbox 没有一起回滚",
                   "rows were left behind: the job and the outbox event did not roll back together")
    row.recover()
    job = row.submit()
    settle(row, job)
    row.recovered()


def case_broker_down(row: Row, lab) -> None:
    if lab.private:
        with row.fault(t("私有 broker（redis-server）已停止", "the private broker (redis-server) is stopped")):
            pid = lab.broker_stop()
            job = row.submit()
            error = None
            try:
                with publishing():
                    lab.publisher.publish_one()
            except Exception as exc:  # noqa: BLE001
                error = exc
            row.note(t(f"broker pid {pid} 已停止；submit → {short(job)} queued；publish_one → "
                       f"{type(error).__name__ if error else '没有异常'}",
                       f"broker pid {pid} stopped; submit → {short(job)} queued; publish_one → "
                       f"{type(error).__name__ if error else 'no exception'}"))
    else:  # no redis-server binary here: only this publisher is pointed at a port nobody listens on
        with row.fault(t("publisher 指向一个没有 broker 的端口", "the publisher points at a port with no broker")):
            job = row.submit()
            closed = free_port()
            done = run_python(["publisher.py"], cwd=WORK, timeout=120,
                              env=dict(os.environ, CELERY_BROKER_URL=f"redis://127.0.0.1:{closed}/0"))
            error = None if done.returncode == 0 and "True" in done.stdout else RuntimeError("publish failed")
    event = events_of(job)
    row.expect(error is not None, "broker 不可用时 publish_one 没有报错（吞掉了发送异常？）",
               "publish_one reported no error with the broker down (send error swallowed?)")
    row.expect(len(event) == 1 and event[0]["sent_at"] is None,
               "broker 不可用时事件必须保留且 sent_at 为 NULL", "with the broker down the event must stay, sent_at NULL")
    row.expect(status_of(job) == "queued", "broker 不可用时任务应保持 queued", "with the broker down the job must stay queued")
    row.observe("queued+unsent")
    row.recover()
    if lab.private:
        lab.broker_start()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the failed publisher's claim runs out
    settle(row, job)
    row.recovered()


def case_publish_before_mark(row: Row, lab) -> None:
    job = row.submit()
    event = pending_of(job)[0]["id"]
    with row.fault(t("发送成功后确认写回失败一次（套件触发器）", "the confirm write after a successful send fails once (kit trigger)")):
        with confirm_lost(event):
            error = None
            try:
                with publishing():
                    lab.publisher.publish_one()
            except Exception as exc:  # noqa: BLE001
                error = exc
        row.expect(any(e["id"] == event for e in pending_of(job)), "确认失败后事件应仍未标记 sent",
                   "after the lost confirm the event must still be unsent")
        lab.wait_ended(job, 1)
        first = job_row(job)
        row.note(t(f"publish_one → {type(error).__name__ if error else '无异常'}；第 1 次投递后任务 {first['status']}，"
                   "事件仍 sent_at=NULL", f"publish_one → {type(error).__name__ if error else 'no exception'}; after "
                   f"delivery 1 the job is {first['status']}, the event still sent_at=NULL"))
    row.recover()
    row.advance(job, claim_seconds_left(job) + 0.001)  # the publisher's claim runs out: the event is due again
    lab.drain()
    lab.wait_ended(job, 2)
    after = settle(row, job)
    sent = [e for e in events_of(job) if e["id"] == event]
    again = [d for d in deliveries(job) if d["task_id"] == event]
    row.expect(sent and sent[0]["sent_at"] is not None, "重发后事件应被确认", "after resending the event must be confirmed")
    row.expect(len(again) >= 2, f"同一事件应送达两次，实际 {len(again)} 次", f"the event should arrive twice, got {len(again)}")
    unchanged = first["status"] != "succeeded" or after["result_ref"] == first["result_ref"]
    row.expect(after["attempts"] == 1 and unchanged,
               f"重复投递改变了结果：attempts {after['attempts']}，result_ref 不变={unchanged}",
               f"the duplicate delivery changed the result: attempts {after['attempts']}, result_ref "
               f"unchanged={unchanged}")
    row.note(t(f"同一事件 {short(event)} 送达 {len(again)} 次（message id 相同），attempts 1，只有一个 result_ref",
               f"event {short(event)} delivered {len(again)} times (same message id), attempts 1, one result_ref"))
    row.recovered()


def case_worker_exit(row: Row, lab) -> None:
    job = row.submit()
    hold(job)
    held = await_hold(row, job)
    running = job_row(job)
    row.expect(running["status"] == "running" and running["attempts"] == 1, "被暂停的执行应处于 running、attempts 1",
               "the held execution should be running with attempts 1")
    token = running["lease_token"]
    pid = int(held["pid"])
    with row.fault(t(f"SIGKILL 持有租约的 worker 子进程 pid {pid}", f"SIGKILL to the pool child holding the lease, pid {pid}")):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_running(pid), 30, t(f"pid {pid} 退出", f"pid {pid} to die"), interval=0.02)
        # task_reject_on_worker_lost sends the message back once the pool notices: that redelivery and
        # the recovery event race for the job later, and claim() lets only one of them in.
        still = job_row(job)
        row.expect(still["status"] == "running" and still["lease_token"] == token,
                   "租约到期前，死掉的执行者仍持有任务（running、同一 token）",
                   "until the lease runs out the dead executor still holds the job (running, same token)")
        row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)  # the lease runs out now
        row.clock_from_here()
        row.observe("running (lease expired)")
    row.recover()
    scan_until(lab, job, ("queued",))
    backoff = seconds_until(job, "next_attempt_at")
    row.note(t(f"recover_batch → queued，next_attempt_at 还有 {backoff:.1f} 秒", f"recover_batch → queued, next_attempt_at "
               f"{backoff:.1f}s ahead"))
    row.advance(job, backoff + 0.001)
    settle(row, job, condition=lambda r: r["attempts"] >= 2 and r["status"] in ("running", "succeeded"))
    row.recovered()
    final = settle(row, job)
    row.expect(final["attempts"] == 2 and final["lease_token"] != token, "恢复后的领取应为 attempts 2、新 token",
               "the claim after recovery must be attempts 2 with a new token")
    row.extra["budget_seconds"] = LEASE_BUDGET
    row.extra["backoff_seconds"] = round(backoff, 3)


def case_stale_token(row: Row, lab) -> None:
    job = row.submit()
    old = lab.state_store.claim(job)
    row.expect(old is not None, "新任务应能被领取", "a fresh job must be claimable")
    token_a = str(old["lease_token"])
    # The first executor stalls: its lease runs out and recovery requeues the job (time moved, not waited).
    row.advance(job, seconds_until(job, "lease_until") + 0.001, setup=True)
    scan_until(lab, job, ("queued",))
    row.advance(job, seconds_until(job, "next_attempt_at") + 0.001, setup=True)
    hold(job)
    await_hold(row, job)
    current = job_row(job)
    row.expect(current["status"] == "running" and current["attempts"] == 2 and current["lease_token"] != token_a,
               "worker 应以新 token 领取（attempts 2）", "the worker should hold a new token (attempts 2)")
    target = WORK / "artifacts" / f"{job}.{token_a}.json"
    with row.fault(t("旧 token 的执行者晚到，尝试 finish", "the old token's executor arrives late and calls finish")):
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(old["payload"], ensure_ascii=False), encoding="utf-8")
        late = lab.state_store.finish(job, token_a, str(target))
        now = job_row(job)
        row.note(t(f"finish(旧 token) → {late}；result_ref={now['result_ref']!r}",
                   f"finish(old token) → {late}; result_ref={now['result_ref']!r}"))
        row.expect(late is False, "旧 token 的 finish 必须返回 False", "finish with the old token must return False")
        row.expect(now["result_ref"] is None and now["lease_token"] == current["lease_token"],
                   "旧 token 不能写 result_ref 或夺回租约", "the old token must not write result_ref or take the lease back")
    row.recover()
    release(job)
    final = lab.wait_status(job, "succeeded")
    again = lab.state_store.finish(job, token_a, str(target))
    after = job_row(job)
    row.expect(again is False and after["result_ref"] == final["result_ref"] and final["result_ref"] != str(target),
               "成功后旧 token 仍不能覆盖 result_ref", "after success the old token still cannot overwrite result_ref")
    row.recovered()
    lab.drain()


def case_cancel(row: Row, lab) -> None:
    job = row.submit()
    hold(job)
    await_hold(row, job)
    with row.fault(t("执行中设置 cancel_requested=TRUE", "cancel_requested=TRUE while the export runs")):
        sql("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
            "WHERE id=%s AND status IN ('queued','running')", (job,))
        release(job)
        lab.wait_ended(job, 1)
        now = job_row(job)
        row.expect(now["status"] != "succeeded" and now["result_ref"] is None,
                   f"取消后仍发布了成功结果（{now['status']}, {now['result_ref']!r}）",
                   f"a success was published after the cancel ({now['status']}, {now['result_ref']!r})")
    row.recover()
    if now["status"] == "running":  # the scanner finishes it once the lease is over (moved, not waited)
        row.advance(job, seconds_until(job, "lease_until") + 0.001)
    final = scan_until(lab, job, ("cancelled",))
    row.expect(final["result_ref"] is None, "cancelled 任务不能有 result_ref", "a cancelled job must have no result_ref")
    row.recovered()
    lab.drain()


def case_exhausted(row: Row, lab) -> None:
    job = row.submit()
    with row.fault(t("连续 3 次领取都在租约内失联（由套件领取，从不完成）",
                     "three claims in a row, each lost with its lease (kit claims that never finish)")):
        for n in (1, 2, 3):
            got = lab.state_store.claim(job)
            row.expect(got is not None and got["attempts"] == n, f"第 {n} 次领取应成功且 attempts={n}",
                       f"claim {n} should work with attempts={n}")
            row.advance(job, seconds_until(job, "lease_until") + 0.001)
            scan_until(lab, job, ("queued",) if n < 3 else ("failed",))
            if n < 3:
                row.advance(job, seconds_until(job, "next_attempt_at") + 0.001)
        letters = dead_letters(job)
        fourth = lab.state_store.claim(job)
        row.note(t(f"3 次过期后 → failed，dead letter {[d['reason'] for d in letters]}；第 4 次 claim → {fourth}",
                   f"after 3 expiries → failed, dead letter {[d['reason'] for d in letters]}; claim 4 → {fourth}"))
        row.expect(len(letters) == 1, "耗尽的任务应有一条 dead letter", "an exhausted job must have one dead letter")
        row.expect(fourth is None, "不能有第 4 次领取", "there must be no fourth claim")
    row.recover()
    lab.drain()  # the recovery events still pending are delivered: nothing may claim
    final = job_row(job)
    row.expect(final["status"] == "failed" and final["attempts"] == 3 and final["result_ref"] is None,
               f"最终应为 failed/3 且无 result_ref，实际 {final['status']}/{final['attempts']}",
               f"the end state must be failed/3 without result_ref, got {final['status']}/{final['attempts']}")
    row.recovered()


def case_result_cache(row: Row, lab) -> None:
    import redis
    from lab16_cache_publisher import NAME
    job = row.submit()
    event = pending_of(job)[0]["id"]
    backend = redis.Redis.from_url(setting("CELERY_RESULT_BACKEND"), socket_connect_timeout=2, socket_timeout=3)
    key = f"celery-task-meta-{event}"
    try:
        with row.fault(t(f"执行这个任务的 worker 把 result_expires 缩短为 {RESULT_TTL} 秒",
                         f"the worker running this job keeps results {RESULT_TTL} s (result_expires shortened)")):
            if lab.cache_publisher is not None:
                handshake.go(lab.cache_folder, [NAME])
                outcome = handshake.wait_result(lab.cache_folder, NAME, timeout=120)
                row.expect(outcome.get("published") is True, f"publish_one 失败：{redact(str(outcome))}",
                           f"publish_one failed: {redact(str(outcome))}")
            else:
                lab.pump()
            settle(row, job)
            lab.wait_ended(job, 1)
            asked = [d.get("ignore_result") for d in deliveries(job)]
            if any(asked):  # the message itself said "keep no result": there is nothing to expire
                seen = t("从未保存（消息带 ignore_result=True）", "never stored (the message said ignore_result=True)")
            else:
                # The worker stores a result before its task_postrun (the probe's end event), so it is
                # there now unless its 2 s already ran out; either way it must be gone below.
                cached = backend.exists(key)
                wait_until(lambda: not backend.exists(key), RESULT_TTL + 60,
                           t("Celery 结果过期", "the Celery result to expire"), interval=0.05)
                seen = t(f"保存过（{RESULT_TTL} 秒后过期）" if cached else f"已过期（{RESULT_TTL} 秒）",
                         f"stored, expired after {RESULT_TTL} s" if cached else f"already expired ({RESULT_TTL} s)")
            state = ask("celery_state", event)  # AsyncResult(event, app=the learner's app).state, in the probe
            row.note(t(f"Celery 结果：{seen}；现在 AsyncResult.state={state}",
                       f"Celery result: {seen}; now AsyncResult.state={state}"))
            row.observe(f"celery:{state}")
            row.expect(state == "PENDING", f"结果应已过期（PENDING），实际 {state}",
                       f"the result should be gone (PENDING), got {state}")
    finally:
        backend.close()
    row.recover()
    if (WORK / "api_db.py").is_file():
        learner("api_db")  # an import that fails is said as such
        with PROBE.app("api_db:app") as client:  # the learner's app behind a TestClient, in the probe
            found = client.get(f"/exports/{job}")
            missing = client.get(f"/exports/{uuid4()}")
        body = found.json() if found.status_code == 200 else {}
        row.note(t(f"GET /exports/{short(job)} → {found.status_code} {body.get('status')}；未知 id → "
                   f"{missing.status_code}",
                   f"GET /exports/{short(job)} → {found.status_code} {body.get('status')}; unknown id → "
                   f"{missing.status_code}"))
        row.expect(found.status_code == 200 and body.get("status") == "succeeded",
                   f"结果缓存过期后查询应为 200 succeeded，实际 {found.status_code}",
                   f"after the cache expired the query must be 200 succeeded, got {found.status_code}")
        row.expect(missing.status_code == 404, "不存在的任务才是 404", "only a job that does not exist is 404")
    else:
        found = ask("status_in_transaction", job)  # through the learner's own transaction(), in the probe
        row.expect(found and found["status"] == "succeeded", "结果缓存过期后 export_jobs 仍应可查",
                   "after the cache expired export_jobs must still answer")
    row.recovered()


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
        if fillers:
            marks = ",".join(["%s"] * len(fillers))
            sql(f"DELETE FROM export_jobs WHERE id IN ({marks})", fillers)
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


# ================================================================ the catalogue

class Case:
    def __init__(self, case_id: str, point: tuple[str, str], operation: tuple[str, str], expect: tuple[str, str], run):
        self.id, self.point, self.operation, self.expect, self.run = case_id, point, operation, expect, run
        self.index = 0  # its place in the catalogue: each row exports a product of its own


CASES = [
    Case("commit_fault_rollback", ("DB事务提交前", "before the DB commit"),
         ("本次提交主动抛异常", "this submit raises before commit"), ("job与outbox同时回滚", "job and outbox roll back together"),
         case_commit_fault),
    Case("broker_unavailable", ("broker不可用", "broker unavailable"), ("停止私有Redis后提交",
                                                                     "submit with the private Redis stopped"),
         ("job与outbox保留，sent_at为空", "job and outbox kept, sent_at NULL"), case_broker_down),
    Case("publish_after_send_before_mark", ("发布后未标sent", "published, not marked sent"),
         ("跳过一次确认写回", "lose one confirm write"),
         ("可重复发布，业务结果仍受CAS保护", "published again; the result stays CAS-protected"), case_publish_before_mark),
    Case("worker_exit_with_lease", ("worker持租约退出", "worker exits holding the lease"),
         ("SIGKILL本次执行进程", "SIGKILL this job's pool process"), ("到期恢复，attempts增加",
                                                                "recovered after expiry, attempts up"),
         case_worker_exit),
    Case("stale_token_late_finish", ("旧token晚到", "old token arrives late"), ("新领取后用旧token完成",
                                                                             "finish with the old token after a new "
                                                                             "claim"),
         ("finish=False，不改result_ref", "finish=False, result_ref untouched"), case_stale_token),
    Case("cancel_requested", ("取消", "cancel"), ("执行中设置cancel_requested", "set cancel_requested mid-run"),
         ("最终cancelled，不发布成功结果", "ends cancelled, no success published"), case_cancel),
    Case("attempts_exhausted", ("次数耗尽", "attempts exhausted"), ("3次领取均过期", "three claims all expire"),
         ("failed及dead letter，无第4次领取", "failed with a dead letter, no fourth claim"), case_exhausted),
    Case("result_cache_expired", ("结果缓存过期", "result cache expired"), ("缩短本地result_expires", "shorten result_expires"),
         ("MySQL状态仍可查询", "the MySQL state still answers"), case_result_cache),
    Case("queue_full", ("队列满", "queue full"), ("小余量下并发提交", "concurrent submits with little room left"),
         ("503，无虚假202", "503, no false 202"), case_queue_full),
    Case("same_slot_concurrent", ("同槽周期重复", "same slot twice"), ("相同slot并发调度", "same slot scheduled concurrently"),
         ("只创建一个周期job", "one scheduled job only"), case_same_slot),
    Case("cross_minute_redelivery", ("周期跨分钟重投", "schedule redelivered across minutes"),
         ("同一模拟信号用两个执行分钟", "one simulated signal, two execution minutes"),
         ("当前模型创建两个槽", "this model creates two slots"), case_cross_minute),
    Case("sent_not_claimed", ("已派发但未领取", "sent but never claimed"), ("标记sent且不发送，时间超过阈值",
                                                                     "marked sent, never sent, past the threshold"),
         ("扫描生成新outbox，恢复后完成", "the scan adds an event; the job completes"), case_sent_unclaimed),
    Case("fail_before_claim", ("claim之前失败", "failure before claim"), ("worker进入claim前连接失败",
                                                                      "the worker's DB connection fails before claim"),
         ("queued路径能重新派发", "the queued path dispatches again"), case_fail_before_claim),
    Case("duplicate_during_backoff", ("退避期间重复消息", "duplicates during backoff"),
         ("next_attempt_at未来时重复消息与claim", "duplicates and claims while next_attempt_at is ahead"),
         ("均返回None，attempts不增加", "all None, attempts unchanged"), case_backoff_duplicates),
    Case("pending_event_rescan", ("pending事件仍在", "pending event still there"), ("同一个queued重复运行扫描器",
                                                                                "scan one queued job repeatedly"),
         ("不为已有pending事件继续新增恢复事件", "no extra recovery event while one is pending"), case_pending_rescan),
]
for _index, _case in enumerate(CASES):
    _case.index = _index
CASE_IDS = [c.id for c in CASES]


# ================================================================ one row, start to end

def baseline(lab, row: Row) -> None:
    """Before a row: no kit fault left in place, broker answering, worker alive and idle, nothing due."""
    drop_kit_triggers()
    for path in (HOLD_LIST, FAIL_LIST):
        path.unlink(missing_ok=True)
    if lab.private and not lab.broker_ping():
        lab.broker_start()
    assert lab.worker is not None and lab.worker.alive(), t("matrix 的 worker 已退出，见 lab16-worker.log",
                                                            "the matrix worker has exited; see lab16-worker.log")
    lab.drain()
    row.known = {r["id"] for r in sql("SELECT id FROM export_jobs")}
    row.baseline = {"broker": "PONG" if (not lab.private or lab.broker_ping()) else "down",
                    "due_events": due_events(), "active_jobs": active_jobs(), "worker_pid": lab.worker.pid}
    row.phases["baseline"] = now_iso()


def restore(lab, row: Row, failed: bool) -> None:
    """After a row, whatever happened: faults removed, held jobs released, a failed row's jobs parked."""
    with contextlib.suppress(Exception):
        drop_kit_triggers()
    for job in row.jobs:
        with contextlib.suppress(OSError):
            release(job)
    for path in (HOLD_LIST, FAIL_LIST):
        path.unlink(missing_ok=True)
    if lab.private and not lab.broker_ping():
        with contextlib.suppress(Exception):
            lab.broker_start()
    if failed:
        with contextlib.suppress(Exception):
            park(row.jobs)


def run_case(case: Case, lab) -> dict:
    started = time.monotonic()
    row = Row(case, lab)
    out = empty_row(case)
    failed = True
    try:
        baseline(lab, row)
        case.run(row, lab)
        assert len(row.faults) == 1, t("这一行没有注入故障", "this row injected no fault")
        assert row.recovery_seconds is not None, t("这一行没有记录恢复", "this row recorded no recovery")
        failed = False
    except AssertionError as exc:
        out["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a row that raised is a failed row, with why
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-2:]
        out["error"] = redact(f"{type(exc).__name__}: {exc} | {''.join(tail).strip()[-300:]}")
    finally:
        restore(lab, row, failed)
    main = row.jobs[0] if row.jobs else None
    final = job_row(main) if main else None
    delivered = deliveries(main) if main else []
    changes = row.transitions()
    out.update({
        "job_id": main, "job_ids": row.jobs, "operated_at": row.operated_at, "phases": row.phases,
        "fault": row.faults[0] if row.faults else None, "faults_injected": len(row.faults),
        "baseline": row.baseline, "observed_states": row.observed_states(changes), "transitions": changes,
        "message_ids": sorted({d["task_id"] for d in delivered}), "deliveries": len(delivered),
        "attempts": final and final["attempts"], "final_status": final and final["status"],
        "result_ref": final and final["result_ref"],
        "recovery_seconds": row.recovery_seconds, "measured_seconds": row.measured_seconds,
        "time_moved_seconds": round(row.skipped, 3), "setup_time_moved_seconds": round(row.setup_moved, 3),
        "redispatches": row.redispatches, "notes": row.notes, **row.extra,
    })
    if final is not None:
        out["duplicate_deliveries"] = max(0, len(delivered) - int(final["attempts"]))
        if final["status"] == "succeeded":
            try:
                out["artifact_sha256"], out["artifact"] = artifact_evidence(final)
            except AssertionError as exc:
                failed = True
                out["error"] = str(exc)
    if "budget_seconds" in out and out.get("recovery_seconds") is not None:
        out["within_budget"] = out["recovery_seconds"] <= out["budget_seconds"]
    out["result"] = "fail" if failed else "pass"
    out["row_seconds"] = round(time.monotonic() - started, 3)
    return out
