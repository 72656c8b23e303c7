"""Lesson 16's failure-matrix drills, rows 1-8 (kit module, not a lesson file): a job's own way from its
submit to its result, with one fault each — the commit, the broker, the lost confirm, the worker that dies
holding the lease, the old token that finishes late, the cancel, exhausted attempts, the expired result
cache.  One function per row; lab16_cases lists them and runs each (baseline → inject → recover).

Each row runs on a job of its own, created inside the row, and injects exactly one fault through
Row.fault.  The learner's code runs in the judge's probe (lab16_fixture.learner, lab16_learner.py), in
the worker and in the learner's own scripts, never in this process.  Its verdict rests on facts: database
rows, the job's committed changes, the deliveries the worker ran and how each ended, HTTP answers, process
ids.  Durable times are moved, not waited out.
"""

from __future__ import annotations

import json
import os
import signal
from uuid import uuid4

from lab16_fixture import (PROBE, RESULT_TTL, ask, claim_seconds_left, confirm_lost, counts, dead_letters, deliveries,
                           events_of, hold, learner, outbox_insert_fails, pending_of, release, seconds_until,
                           status_of)
from lab16_publishing import CACHE_PUBLISHER, publishing
from lab16_row import LEASE_BUDGET, Row, await_hold, scan_until, settle

from shared import handshake
from shared.celerylab import WORK, pid_running, redact, setting, short
from shared.i18n import t
from shared.labdb import job_row, sql
from shared.proc import free_port, run_python, wait_until


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
    job = row.submit()
    event = pending_of(job)[0]["id"]
    backend = redis.Redis.from_url(setting("CELERY_RESULT_BACKEND"), socket_connect_timeout=2, socket_timeout=3)
    key = f"celery-task-meta-{event}"
    try:
        with row.fault(t(f"执行这个任务的 worker 把 result_expires 缩短为 {RESULT_TTL} 秒",
                         f"the worker running this job keeps results {RESULT_TTL} s (result_expires shortened)")):
            if lab.cache_publisher is not None:
                handshake.go(lab.cache_folder, [CACHE_PUBLISHER])
                outcome = handshake.wait_result(lab.cache_folder, CACHE_PUBLISHER, timeout=120)
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
