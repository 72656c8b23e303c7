"""Verifier for lesson 13: a capacity gate in front of submit, and short and long jobs on separate queues.

Limit L below is the configured one: the default of admit_export's `limit` parameter (the value
every path that calls admit_export(cur) uses; the course's default is 100).

13.1  Leftover rows (queued, running, some without any outbox event) fill all but one place: L-1.
      Three producer processes submit at the same moment; a kit trigger holds the first INSERT
      for an instant (the kit's user lock) until all three have reached the database — with the gate,
      the other two are waiting for the gate row; without it, all three have counted L-1.  Exactly
      one is admitted, queued+running == L.  Then, without the trigger, 3 processes × 4 submits at
      L-3: exactly 3 admitted, the rest CapacityExceeded, queued+running == L
13.2  Submits of 1, 30, 31 and 60 products: the events say exports.fast, exports.fast, exports.bulk,
      exports.bulk; the learner's publish_one sends them; the fast@ worker consumes exactly the first two
      and the bulk@ worker exactly the last two (each delivery's node and queue are recorded; what is
      judged is who consumed each message, and the jobs' end states are shown)
13.3  The HTTP submit (the folder's api_db.py POST /exports, or the kit's route around accept_export):
      at L-1 a POST is 202 with a job id that has its job row and event; at L a POST is 503 with
      Retry-After: 5, no job id, and no new job or event row
13.4  Both workers paused (SIGSTOP, by PID); a leftover running job an hour old; up to 6 short jobs
      and 1 long one submitted and aged 70…10 s (created_at moved back by UPDATE, not waited for).  The
      course's backlog queries show them; the publisher sends every event while the workers are still
      paused (a publisher only sends); the workers resume and the fast worker's first job is held while
      it writes its file (the probe): that first job is the oldest, so the queued group's oldest age has
      fallen while the others provably still wait.  Released, the queue drains; the leftover running row
      still shows in its own group
13.5  Two long jobs go to the bulk worker, which is released only once the publisher has confirmed them;
      the first one it takes is held while writing (the probe's "hold" event): the bulk worker is busy.
      A short job is submitted and confirmed, the fast worker resumes, and the job completes on fast@
      while the long job is still held (no "release" event, its row still running)
13.6  exercise, with EXPORT_ADMISSION_LIMIT=5 in the environment of every process the kit starts
      (or a limit of 5 written in the code): admit_export's default is 5; two producers from empty
      admit exactly 5; at 5 the direct admit_export(cur) call, the HTTP submit and python
      submit_db_export.py all refuse, and one place freed lets the HTTP submit in again; finally two
      producers at the edge (4 rows, one of them running, first INSERT held) admit exactly one.
      SKIP when nothing refuses below 100 (the limit was not lowered)
13.7  claim(job_id) of one known job, called in a helper process while a kit transaction holds what the
      publisher's confirm holds (UPDATE export_outbox SET sent_at …, whose foreign-key check share-locks
      the job row): it must wait for the lock — the server shows its statement in LOCK WAIT — and,
      once the kit lets go, return the job (running, attempts 1).  None while the row is locked is the
      SKIP LOCKED race that leaves a job queued for good

Races are forced, never hoped for: the kit holds a lock until the server shows every helper waiting
for it (or finished), then lets go.  So that a slow machine cannot turn the kit's hold into a timeout,
the helper processes (lab13_tools.py) let the learner's sessions wait as long as the kit holds.  A
worker's claim never meets a publisher's confirm where a check needs its job to complete (13.4, 13.5):
the workers stay paused until the publisher has confirmed those events; 13.2 judges who consumed each
message, which that race cannot change.  The race itself is 13.7's, forced on purpose.

The checker starts its own two workers (celery -A lab13_probe:app … -Q exports.fast / exports.bulk,
--concurrency=1, --prefetch-multiplier=1, -n fast@%h / bulk@%h) when a check first needs them, and
stops them by PID.  It reads the database through its own connections and never prints credentials.
Every check starts from a clean backlog: queued/running rows of earlier checks are cancelled, their
unsent events marked sent, the two queues emptied.

This file holds the checks; lab13_fixture.py the lab they run in (database view, workers, publisher,
probe events, HTTP submit), lab13_gate.py the races (the INSERT hold, the producers, 13.7's claimer under
the confirm's lock) and lab13_figures.py the timelines drawn for 13.1 and 13.5.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from lab13_figures import admission_steps, isolation_lanes
from lab13_fixture import (EVENTS, TERMINAL, active_count, add_filler, age_jobs, backlog, body_of, configured_limit,
                           counts, delivered, event_of, first_held, hold, http_app, http_full_freed_full, learner,
                           oldest_queued, pause, publisher_loop, release, released, reset, serve, server_now, show,
                           show_zh, starts, stop_workers, store, stuck_reason, submit_quietly, tool, wait_confirmed,
                           wait_done, waits_elsewhere, workers)
from lab13_gate import (Producers, answer_after_waiting, assert_no_errors, burst_near_edge, claim_once_more,
                        claim_while_confirm_holds, classify, describe_claim, helpers_ready, outcome_text, outcome_zh,
                        race_at_edge, start_claimer)
from lab13_tools import WAIT_TIMEOUTS  # errors that end a wait by time, not by what the statement found

from shared import handshake
from shared.celerylab import WORK
from shared.figures import attach
from shared.i18n import t
from shared.labdb import job_row
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
    state_store = store()
    limit = configured_limit(state_store)
    assert limit >= 4, t(f"配置的容量 {limit} 太小，本项需要至少 4（练习的 5 见 13.6）",
                         f"the configured limit {limit} is too small for this item (at least 4; the exercise's 5 "
                         "is 13.6)")
    running, bare = max(1, (limit - 1) // 4), max(1, (limit - 1) // 4)
    since = server_now()  # for the figure: the rows this check makes
    producers = Producers(["P1", "P2", "P3"])
    try:
        race = race_at_edge(c, producers, limit, running=running, bare=bare)
        c.note(t(f"容量 L={limit}（admit_export 的默认值）；已有 {limit - 1} 行占位（其中 running {running}，"
                 f"没有 outbox 事件的 {bare}）",
                 f"limit L={limit} (admit_export's default); {limit - 1} rows already hold places ({running} running, "
                 f"{bare} without any outbox event)"))
        c.note(t(f"3 个进程同时提交，第一个 INSERT 被按住：{race['seen']['insert']} 个停在 INSERT，"
                 f"{race['seen']['waiting']} 个在等锁：{'、'.join(race['seen']['statements']) or '（无）'}",
                 f"3 processes submit at once, the first INSERT held: {race['seen']['insert']} waiting inside the "
                 f"INSERT, {race['seen']['waiting']} waiting for a lock in "
                 f"{'; '.join(race['seen']['statements']) or '(none)'}"))
        c.note(t(f"放行后 → {outcome_zh(race)}；queued+running = {race['active']}",
                 f"released → {outcome_text(race)}; queued+running = {race['active']}"))
        took_turns = race["seen"]["insert"] == 1 and race["seen"]["waiting"] >= 1
        assert race["active"] <= limit or took_turns, t(
            f"queued+running 达到 {race['active']}，超过容量 {limit}：只剩 1 个位置时 {len(race['ok'])} 个并发提交都被受理。"
            "在同一事务里先 SELECT … FOR UPDATE 锁住 export_admission_gate 的 id=1，再计数和插入",
            f"queued+running reached {race['active']}, past the limit {limit}: with one place left, {len(race['ok'])} "
            "concurrent submits were all admitted. Lock export_admission_gate id=1 with SELECT … FOR UPDATE first, "
            "then count and insert, in the same transaction")
        # Turns were taken and exactly one got in too many: the count was right, the comparison let the
        # count equal to the limit through (with the running jobs left out, every submit would get in).
        assert race["active"] != limit + 1, t(
            f"queued+running 达到 {race['active']}，超过容量 {limit}：提交在门闩处排了队，计数也对，但最后一个位置被给了两次："
            f"已有 {limit} 个时服务就满了——比较要写 count >= limit 时拒绝（只有 count < limit 才有空位）",
            f"queued+running reached {race['active']}, past the limit {limit}: the submits took turns at the gate and "
            f"the count was right, but the last place was given out twice: with {limit} already in, the service is "
            "full — refuse when count >= limit (a place is free only while count < limit)")
        assert race["active"] <= limit, t(
            f"queued+running 达到 {race['active']}，超过容量 {limit}：提交在门闩处排了队，但计数仍放它们进来了。"
            "要数 status IN ('queued','running')：执行中的任务同样占着位置",
            f"queued+running reached {race['active']}, past the limit {limit}: the submits took turns at the gate, "
            "yet the count let them in. Count status IN ('queued','running'): a running job holds a place too")
        assert_no_errors(race)
        assert len(race["ok"]) == 1, t(
            f"只剩 1 个位置时应恰好受理 1 个，实际 {len(race['ok'])} 个（running 和没有事件的旧行也占容量吗？）",
            f"with one place left exactly 1 submit must be admitted, got {len(race['ok'])} (do running rows and old "
            "rows without an event count?)")

        burst = burst_near_edge(producers, limit, running=running, bare=bare)
        active = burst["active"]
        c.note(t(f"不加触发器、剩 3 个位置：3 个进程各提交 4 次 → {outcome_zh(burst)}；queued+running = {active}",
                 f"no trigger, 3 places left: 3 processes × 4 submits → {outcome_text(burst)}; "
                 f"queued+running = {active}"))
        assert active <= limit, t(f"queued+running 达到 {active}，超过容量 {limit}",
                                  f"queued+running reached {active}, past the limit {limit}")
        assert_no_errors(burst)
        assert len(burst["ok"]) == 3, t(f"剩 3 个位置应恰好受理 3 个，实际 {len(burst['ok'])} 个",
                                        f"3 places left must admit exactly 3 submits, got {len(burst['ok'])}")
    finally:
        attach(c, lambda: admission_steps(since, limit))  # pass or fail, before the rows are retired
        producers.stop()
        reset()


# ---------------------------------------------------------------- 13.2

def check_routing(c) -> None:
    state_store = store()
    learner.module("publisher", "claim_event", "publish_one")
    reset()
    procs = workers()
    cases = [(1, "exports.fast"), (30, "exports.fast"), (31, "exports.bulk"), (60, "exports.bulk")]
    jobs = []
    for size, queue in cases:
        job = submit_quietly(state_store, list(range(1, size + 1)))
        event = event_of(job)
        assert event is not None, t(f"{size} 个商品的任务没有 outbox 事件", f"the {size}-product job has no outbox event")
        jobs.append((job, size, queue, event))
    c.note(t("提交 1、30、31、60 个商品 → 事件 queue_name：" + "、".join(e["queue_name"] for *_, e in jobs),
             "submits of 1, 30, 31, 60 products → event queue_name: " + ", ".join(e["queue_name"] for *_, e in jobs)))
    for job, size, queue, event in jobs:
        assert event["queue_name"] == queue, t(
            f"{size} 个商品的事件 queue_name={event['queue_name']}，应为 {queue}（≤30 行走 exports.fast，更多走 exports.bulk）",
            f"the {size}-product event has queue_name={event['queue_name']}, expected {queue} (≤ 30 rows: "
            "exports.fast, more: exports.bulk)")
    # Judged: who consumed each message.  Waiting for each delivery's end (not for the job's success)
    # keeps the verdict off the claim race of 13.7: a claim that skipped a locked row was still consumed here.
    with publisher_loop():
        try:
            wait_until(lambda: all(delivered(e["id"]) for *_, e in jobs), 30, "every message to be consumed",
                       interval=0.05)
        except WaitTimeout:
            job, size = next((j, n) for j, n, _, e in jobs if not delivered(e["id"]))
            raise AssertionError(t(f"{size} 个商品的任务 30 秒内没有被 worker 执行完：{stuck_reason(job)}",
                                   f"no worker ran the {size}-product job's message to its end within 30 s: "
                                   f"{stuck_reason(job)}")) from None
    rows = {job: job_row(job) for job, *_ in jobs}
    c.note(t("任务结束状态：" + "，".join(f"{n} 行 {rows[j] and rows[j]['status']}" for j, n, *_ in jobs),
             "the jobs ended: " + ", ".join(f"{n} rows {rows[j] and rows[j]['status']}" for j, n, *_ in jobs)))
    for job, size, *_ in jobs:
        if not (rows[job] and rows[job]["status"] == "succeeded"):
            c.note(f"  {size}: {stuck_reason(job)}")
    lines_zh, lines_en = [], []
    for job, size, queue, _ in jobs:
        seen = starts(job)
        expected = queue.split(".")[1] + "@"
        nodes = sorted({str(e.get("node")) for e in seen})
        lines_zh.append(f"{size} 行 → {', '.join(nodes)}（{', '.join(sorted({str(e.get('queue')) for e in seen}))}）")
        lines_en.append(f"{size} rows → {', '.join(nodes)} ({', '.join(sorted({str(e.get('queue')) for e in seen}))})")
        assert seen, t(f"{size} 个商品的任务的消息执行完了，却没有记录到它的开始", f"the {size}-product job's message "
                       "ran to its end, but no start of it was recorded")
        wrong = [e for e in seen if not str(e.get("node")).startswith(expected) or e.get("queue") != queue]
        assert not wrong, t(f"{size} 个商品的任务被 {wrong[0].get('node')} 从 {wrong[0].get('queue')} 消费，应只由 "
                            f"{expected}… 从 {queue} 消费",
                            f"the {size}-product job was consumed by {wrong[0].get('node')} from "
                            f"{wrong[0].get('queue')}; "
                            f"only {expected}… from {queue} may consume it")
    c.note(t("执行者：" + "；".join(lines_zh), "consumed by: " + "; ".join(lines_en)))
    c.note(t(f"两个 worker 各 concurrency=1、prefetch 1（pid {procs['fast'].pid} / {procs['bulk'].pid}）",
             f"two workers, concurrency=1 and prefetch 1 each (pid {procs['fast'].pid} / {procs['bulk'].pid})"))


# ---------------------------------------------------------------- 13.3

def check_http_503(c) -> None:
    state_store = store()
    limit = configured_limit(state_store)
    app, how = http_app()
    reset()
    add_filler(limit - 1, running=max(0, (limit - 1) // 4), with_events=(limit - 1) // 2)
    with serve(app) as client:
        c.note(t(f"HTTP 提交：{how}；容量 L={limit}，已有 {limit - 1} 行", f"HTTP submit: {how}; limit L={limit}, "
                 f"{limit - 1} rows present"))
        first = client.post("/exports", json={"product_ids": [4]})
        body = body_of(first)
        c.note(t(f"剩 1 个位置：POST /exports → {first.status_code} {str(body)[:120]}",
                 f"one place left: POST /exports → {first.status_code} {str(body)[:120]}"))
        assert first.status_code == 202, t(f"容量未满时应返回 202，实际 {first.status_code}",
                                           f"below capacity the answer must be 202, got {first.status_code}")
        job_id = body.get("job_id") if isinstance(body, dict) else None
        assert job_id and job_row(str(job_id)) and event_of(str(job_id)), t(
            "202 的响应里要有 job_id，且这个任务行和它的 outbox 事件都已存在",
            "the 202 answer must carry a job_id whose job row and outbox event both exist")

        before = counts()
        full = client.post("/exports", json={"product_ids": [5]})
        after = counts()
        full_body = body_of(full)
        c.note(t(f"已满（queued+running={active_count()}）：POST /exports → {full.status_code}，"
                 f"Retry-After: {full.headers.get('retry-after')}，{str(full_body)[:120]}",
                 f"full (queued+running={active_count()}): POST /exports → {full.status_code}, "
                 f"Retry-After: {full.headers.get('retry-after')}, {str(full_body)[:120]}"))
        c.note(t(f"任务 {before[0]} → {after[0]}，事件 {before[1]} → {after[1]}",
                 f"jobs {before[0]} → {after[0]}, events {before[1]} → {after[1]}"))
        assert full.status_code == 503, t(
            f"容量已满应返回 503，实际 {full.status_code}：整个服务暂满用 503（429 留给单个用户的配额）",
            f"at capacity the answer must be 503, got {full.status_code}: a full service is 503 (429 is for one "
            "user's quota)")
        assert full.headers.get("retry-after") == "5", t(
            f"503 要带 Retry-After: 5，实际 {full.headers.get('retry-after')!r}",
            f"the 503 must carry Retry-After: 5, got {full.headers.get('retry-after')!r}")
        assert not (isinstance(full_body, dict) and full_body.get("job_id")), t(
            "503 的响应里不能有 job_id", "a 503 answer must not carry a job_id")
        assert after == before, t("503 之后仍多出了任务或事件行：容量检查要在 INSERT 之前、同一事务里",
                                  "the 503 still left a job or event row behind: check capacity before the INSERTs, "
                                  "in the same transaction")
    reset()


# ---------------------------------------------------------------- 13.4

def check_backlog(c) -> None:
    state_store = store()
    learner.module("publisher", "claim_event", "publish_one")
    limit = configured_limit(state_store)
    assert limit >= 4, t(f"配置的容量 {limit} 太小，本项需要至少 4", f"the configured limit {limit} is too small for "
                         "this item (at least 4)")
    short_jobs = min(6, limit - 2)  # the leftover and the long job take a place each
    reset()
    procs = workers()
    leftover = add_filler(1, running=1, age_seconds=3600)[0]
    jobs: list[str] = []
    pause(procs, signal.SIGSTOP)
    try:
        jobs = [submit_quietly(state_store, [k]) for k in range(11, 11 + short_jobs)]
        jobs.append(submit_quietly(state_store, list(range(1, 41))))
        ages = [70 - 10 * k for k in range(short_jobs)] + [10]
        age_jobs(jobs, ages)
        # The fast worker's first job stays running (held writing its file): the others provably still wait.
        hold(jobs[:short_jobs])
        before_jobs, before_outbox = backlog()
        c.note(t(f"worker 已暂停（SIGSTOP）；提交 {short_jobs} 个短任务和 1 个长任务，created_at 用 UPDATE 拨到 "
                 f"{ages[0]}…10 秒前；另有 1 个 1 小时前遗留的 running",
                 f"workers paused (SIGSTOP); {short_jobs} short and 1 long job submitted, created_at moved "
                 f"{ages[0]}…10 s back by UPDATE; plus one running row left over from an hour ago"))
        c.note(t(f"积压（暂停中）：{show_zh(before_jobs)}；未发布：{show_zh(before_outbox)}",
                 f"backlog (paused): {show(before_jobs)}; unpublished: {show(before_outbox)}"))
        assert before_jobs.get("queued", (0, 0))[0] == len(jobs), t(
            f"暂停时应有 {len(jobs)} 个 queued，实际 {before_jobs.get('queued', (0, 0))[0]}",
            f"{len(jobs)} jobs should be queued while paused, found {before_jobs.get('queued', (0, 0))[0]}")
        with publisher_loop() as publisher:
            wait_confirmed(c, jobs, publisher)
        sent_jobs, sent_outbox = backlog()
        c.note(t(f"worker 仍暂停，publisher 发完全部事件：{show_zh(sent_jobs)}；未发布：{show_zh(sent_outbox)}",
                 f"workers still paused, the publisher sent every event: {show(sent_jobs)}; unpublished: "
                 f"{show(sent_outbox)}"))
        start_age, oldest_before = sent_jobs["queued"][1], oldest_queued()
        pause(procs, signal.SIGCONT)
        first = first_held(jobs[:short_jobs], 30, "fast")  # a short job's first file write, held
        during_jobs, _ = backlog()
        oldest_now = oldest_queued()
        waiting = during_jobs.get("queued", (0, 0.0))
        moved = (oldest_now["created_at"] - oldest_before["created_at"]).total_seconds() if oldest_now else 0.0
        node = next((str(e.get("node")) for e in starts(first)), "?")
        c.note(t(f"恢复 worker：{node} 先取的是 {ages[jobs.index(first)]} 秒前提交的任务（按住在写文件）；"
                 f"queued 最老等待 {start_age:.1f} 秒 → {waiting[1]:.1f} 秒，还有 {waiting[0]} 个在等"
                 f"（最老的 created_at 向后移了 {moved:.0f} 秒）",
                 f"workers resumed: {node} took the job submitted {ages[jobs.index(first)]} s ago first "
                 f"(held while writing); oldest queued age {start_age:.1f}s → {waiting[1]:.1f}s while {waiting[0]} "
                 f"still wait (the oldest created_at moved {moved:.0f} s forward)"))
        release(jobs)
        rows = wait_done(jobs, 30)
        after_jobs, after_outbox = backlog()
        c.note(t(f"放开后排空：{show_zh(after_jobs)}；未发布：{show_zh(after_outbox)}",
                 f"released and drained: {show(after_jobs)}; unpublished: {show(after_outbox)}"))
        unfinished = [j for j in jobs if not rows[j] or rows[j]["status"] != "succeeded"]
        assert not unfinished, t(f"恢复后仍有 {len(unfinished)} 个任务没有完成：{stuck_reason(unfinished[0])}",
                                 f"{len(unfinished)} jobs did not complete after the resume: "
                                 f"{stuck_reason(unfinished[0])}")
        assert first == jobs[0] and waiting[0] >= 1 and moved > 0, t(
            "积压清空前，queued 的最老等待没有下降：最老的任务没有被先处理。publisher 要按 ORDER BY created_at, id "
            "先发最老的事件",
            "the oldest queued age did not fall while jobs still waited: the oldest job was not served first. The "
            "publisher must send the oldest event first (ORDER BY created_at, id)")
        assert after_jobs.get("running", (0, 0))[0] == 1 and after_jobs["running"][1] >= 3500, t(
            "遗留的 running 行应仍在 running 组里（它也占容量）", "the leftover running row should still show in the "
            "running group (it holds capacity too)")
        assert job_row(leftover)["status"] == "running"
    finally:
        pause(procs, signal.SIGCONT)
        release(jobs)
        reset()


# ---------------------------------------------------------------- 13.5

def check_fast_isolated(c) -> None:
    state_store = store()
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
            bulk_jobs.append(submit_quietly(state_store, list(range(1, size + 1))))
            moments[bulk_jobs[-1]] = time.time()
        hold(bulk_jobs)
        with publisher_loop() as publisher:
            wait_confirmed(c, bulk_jobs, publisher)
            pause({"bulk": procs["bulk"]}, signal.SIGCONT)
            busy = first_held(bulk_jobs, 30, "bulk")
            other = job_row(bulk_jobs[1 - bulk_jobs.index(busy)])["status"]
            c.note(t(f"2 个长任务（40、50 行）：bulk@ 正在执行其中一个（被按住在写文件），另一个 {other}",
                     f"2 long jobs (40, 50 rows): bulk@ runs one of them (held while writing), the other is {other}"))

            fast = submit_quietly(state_store, [7])
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
            still_busy = not released(busy) and busy_row is not None and busy_row["status"] == "running"
            seen = starts(fast)
            c.note(t(f"此时提交 1 行的短任务（事件已确认后 fast worker 才恢复）→ {row and row['status']}，执行者 "
                     f"{', '.join(str(e.get('node')) for e in seen) or '无'}；长任务仍在执行：{still_busy}",
                     f"a 1-row job submitted now (the fast worker resumed once its event was confirmed) → "
                     f"{row and row['status']}, run by {', '.join(str(e.get('node')) for e in seen) or 'nobody'}; "
                     f"the long job still running: {still_busy}"))
            attach(c, lambda: isolation_lanes(bulk_jobs, fast, moments))  # the long job still held
            drawn = True
            assert row and row["status"] == "succeeded", t(
                f"bulk worker 忙时短任务没有完成：{stuck_reason(fast)}",
                f"the short job did not complete while the bulk worker was busy: {stuck_reason(fast)}")
            assert still_busy, t("短任务完成前长任务已经结束，无法证明隔离", "the long job ended before the short one "
                                 "completed: isolation not shown")
            assert seen and all(str(e.get("node")).startswith("fast@") for e in seen), t(
                "短任务应由 fast@ worker 执行", "the short job must be run by the fast@ worker")
            release(bulk_jobs)
            rows = wait_done(bulk_jobs, 30)
            c.note(t(f"放开后长任务：{', '.join(str(r and r['status']) for r in rows.values())}",
                     f"released, the long jobs: {', '.join(str(r and r['status']) for r in rows.values())}"))
    finally:
        if not drawn:  # it failed earlier: what happened so far
            attach(c, lambda: isolation_lanes(bulk_jobs, fast, moments))
        pause(procs, signal.SIGCONT)
        release(bulk_jobs)
        reset()


# ---------------------------------------------------------------- 13.6

def check_exercise(c) -> None:
    store()
    env5 = dict(os.environ, EXPORT_ADMISSION_LIMIT="5")
    default = tool(["limit"], env5).get("default")
    reset()
    producers = Producers(["A", "B"], env=env5)
    try:
        fill = classify(producers.results(producers.go(4, [6]), 20))
        active = active_count()
        c.note(t(f"EXPORT_ADMISSION_LIMIT=5：admit_export 的默认 limit = {default!r}；两个 producer 从 0 开始各提交 4 次 → "
                 f"{outcome_zh(fill)}；queued+running = {active}",
                 f"EXPORT_ADMISSION_LIMIT=5: admit_export's default limit = {default!r}; two producers from empty, "
                 f"4 submits each → {outcome_text(fill)}; queued+running = {active}"))
        assert_no_errors(fill)
        if default != 5 and fill["capacity"] == 0 and fill["lock_wait"] == 0:
            c.skip(t("容量仍高于 5（没有任何提交被拒绝）：练习未做。把 admit_export 的默认 limit 改为 5，或按指南读取 "
                     "EXPORT_ADMISSION_LIMIT", "the limit is still above 5 (no submit was refused): exercise not "
                     "attempted. Set admit_export's default limit to 5, or read EXPORT_ADMISSION_LIMIT as the guide "
                     "shows"))
        assert default == 5, t(
            f"提交路径在 5 处拒绝了，但 admit_export 的默认 limit 是 {default!r}：周期创建和重放（第 14、15 课）调用 "
            "admit_export(cur)，会照旧受理。上限只定义一处，作为 admit_export 的默认值",
            f"the submit path refused at 5 but admit_export's default limit is {default!r}: schedules and replays "
            "(lessons 14, 15) call admit_export(cur) and would keep admitting. Define the limit once, as "
            "admit_export's default")
        assert active <= 5, t(f"两个 producer 让 queued+running 达到 {active}，超过 admit_export 默认值所说的 5："
                              "计数要和 limit 参数比较，而且在共享的数据库里数，而不是每个进程各数各的",
                              f"two producers pushed queued+running to {active}, past the 5 that admit_export's "
                              "default "
                              "says: compare the count with the limit parameter, counted in the shared database "
                              "(not per process)")
        assert len(fill["ok"]) == 5, t(f"从 0 开始应恰好受理 5 个，实际 {len(fill['ok'])} 个",
                                       f"from empty exactly 5 submits must be admitted, got {len(fill['ok'])}")

        direct = tool(["admit"], env5)
        c.note(t(f"满 5 个时直接调用 admit_export(cur)（周期创建/重放的方式）→ {'拒绝' if 'capacity' in direct else direct}",
                 f"at 5, admit_export(cur) called directly (as schedules and replays do) → "
                 f"{'refused' if 'capacity' in direct else direct}"))
        assert "capacity" in direct, t(f"满 5 个时 admit_export(cur) 没有抛 CapacityExceeded：{direct}",
                                       f"at 5 admit_export(cur) did not raise CapacityExceeded: {direct}")
        before = counts()
        script = run_python(["submit_db_export.py"], cwd=WORK, timeout=30, env=env5)
        after = counts()
        c.note(t(f"满 5 个时 python submit_db_export.py → 退出码 {script.returncode}，任务 {before[0]} → {after[0]}",
                 f"at 5, python submit_db_export.py → exit {script.returncode}, jobs {before[0]} → {after[0]}"))
        assert script.returncode != 0 and after == before, t(
            "满 5 个时 submit_db_export.py 仍受理了任务：它必须经过同一个 admit_export",
            "at 5 submit_db_export.py still admitted a job: it must go through the same admit_export")
        how, full, freed, again = http_full_freed_full(env5)
        c.note(t(f"HTTP（{how}）：满 5 个 → {full.status_code}；完成 1 个后 → {freed.status_code}；再提交 → {again.status_code}",
                 f"HTTP ({how}): at 5 → {full.status_code}; after one finished → {freed.status_code}; once more → "
                 f"{again.status_code}"))
        assert (full.status_code, freed.status_code, again.status_code) == (503, 202, 503), t(
            "HTTP 提交应使用同一个上限 5：满时 503，空出 1 个位置后 202，再满时 503",
            "the HTTP submit must use the same limit 5: 503 when full, 202 once a place is free, 503 when full again")

        race = race_at_edge(c, producers, 5, running=1, bare=1)
        c.note(t(f"边界：已有 4 行（1 个 running），两个 producer 同时提交 → {outcome_zh(race)}；queued+running = "
                 f"{race['active']}",
                 f"at the edge: 4 rows (1 running), two producers at once → {outcome_text(race)}; queued+running = "
                 f"{race['active']}"))
        assert race["active"] <= 5, t(f"两个 producer 同时提交让 queued+running 达到 {race['active']}，超过 5：计数前先锁门闩行",
                                      f"two producers at once pushed queued+running to {race['active']}, past 5: lock "
                                      "the gate row before counting")
        assert_no_errors(race)
        assert len(race["ok"]) == 1, t(f"剩 1 个位置时应恰好受理 1 个，实际 {len(race['ok'])}",
                                       f"with one place left exactly 1 must be admitted, got {len(race['ok'])}")
    finally:
        producers.stop()
        reset()


# ---------------------------------------------------------------- 13.7

def check_claim_waits(c) -> None:
    state_store = learner.module("state_store", "submit_snapshot", "claim", "CapacityExceeded")
    reset()
    job = submit_quietly(state_store, [9])
    event = event_of(job)
    assert event is not None, t("提交的任务没有 outbox 事件", "the submitted job has no outbox event")
    folder, helper = start_claimer(job)
    try:
        helpers_ready(folder, {"C": helper})
        early, waiting = claim_while_confirm_holds(c, folder, helper, job, event["id"])
        if early is not None:
            status = (job_row(job) or {}).get("status")
            c.note(t(f"在这行仍被锁住时，另一个进程里的 claim(job_id) → {describe_claim(early)}；任务现在是 {status}",
                     f"while the row was still locked, claim(job_id) in another process → {describe_claim(early)}; "
                     f"the job is now {status}"))
            assert early.get("code") in WAIT_TIMEOUTS, t(
                "这行被锁住的一瞬间（检查器持有 outbox 确认的外键检查所加的共享锁），claim 没有等锁就返回了 None，"
                f"任务仍是 {status}：它跳过了被锁的行（FOR UPDATE SKIP LOCKED）。真实运行里，publisher 确认"
                "（UPDATE export_outbox SET sent_at …）时消息已经发出，worker 的 claim 恰好撞上这几毫秒，任务就永远停在 "
                "queued。按 id 领取一个已知的行要用普通 FOR UPDATE：等这把短暂的锁放开（最多 innodb_lock_wait_timeout），"
                "再按最新的行判断条件；SKIP LOCKED 只留给“拿任意一行”的扫描（见本课指南）"
                if early.get("none") else
                f"这行被锁住时 claim 没有等锁：{describe_claim(early)}",
                "while the job's row was locked for a moment (the kit held the share lock the outbox confirm's "
                f"foreign-key check takes), claim returned None without waiting, and the job is still {status}: it "
                "skipped the locked row (FOR UPDATE SKIP LOCKED). In a real run the message is already out when the "
                "publisher confirms (UPDATE export_outbox SET sent_at …); a worker whose claim lands in those "
                "milliseconds leaves the job queued for good. Claim one known id with a plain FOR UPDATE: wait for "
                "that brief lock (at most innodb_lock_wait_timeout), then judge the conditions on the latest row; "
                "keep SKIP LOCKED for scans that may take any row (see the guide)"
                if early.get("none") else
                f"while the row was locked, claim did not wait for the lock: {describe_claim(early)}")
            result = early  # it waited, and its own time limit ended the wait: ask once more, the row now free
        else:
            result = answer_after_waiting(c, folder, job, waiting)
        if result.get("code") in WAIT_TIMEOUTS:
            result = claim_once_more(c, folder)
        assert "job" in result and result["job"]["id"] == job, t(
            f"锁放开后 claim 应返回这个任务，实际 {describe_claim(result)}："
            + ("等到锁之后要按最新的行重新判断条件；这个任务仍可领取" if result.get("none") else "见上方"),
            f"once the lock was gone claim should return this job, got {describe_claim(result)}: "
            + ("after the wait, judge the conditions on the latest row; this job is still claimable"
               if result.get("none") else "see above"))
        row = job_row(job)
        assert row and row["status"] == "running" and int(row["attempts"]) == 1 \
            and str(row["lease_token"]) == result["job"]["lease_token"], t(
            f"claim 返回了任务，但行是 {row and row['status']}，attempts={row and row['attempts']}",
            f"claim returned the job, but the row is {row and row['status']}, attempts={row and row['attempts']}")
        c.note(t("任务行：running，attempts=1，lease_token 与返回值一致",
                 "the job's row: running, attempts=1, the returned lease_token"))
    finally:
        handshake.stop(folder)
        helper.stop(grace=3)
        reset()


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    EVENTS.parent.mkdir(parents=True, exist_ok=True)
    run(checks(), teardown=stop_workers)
