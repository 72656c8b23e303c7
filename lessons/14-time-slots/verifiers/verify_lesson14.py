"""Verifier for lesson 14: durable time slots — at most one scheduled job per slot, and where that ends.

14.1  schedule_once(key, [id]) twice for a fresh key: a job_id, then None; the slot row points at that
      job, the job is queued with the snapshot, it has exactly one unsent outbox event, and the tables
      grew by exactly one job, one slot and one event (no orphan job from the second call)
14.2  a real `celery beat` (one process, its schedule file in the kit's log dir, the tick interval
      shortened to 1 s in that process only — the lesson's file keeps 60 s) sends
      products.schedule_tick; the fast worker (-Q exports.fast) runs it and creates the slot's job;
      `python publisher.py` sends its event; the bulk worker (-Q exports.bulk) writes the file and
      finishes the job.  The file holds the job's payload; beat itself runs no task.  The probe marks
      every event with this check's run id (LAB14_RUN), so only these processes' events are read
14.3  execution_slot refuses a naive datetime; in two processes with different local time zones the
      same instant written in +08:00, UTC and -05:00 gives one and the same name, a different instant
      gives another (a name taken from local or wall-clock time differs between them)
14.4  schedule_tick is run by the kit with its clock set to 10:00:30 and 10:03:10 of a far-away day,
      as if beat had been stopped in between: exactly the slots of those two minutes exist in that
      window, none for 10:01 and 10:02, and no job without its slot
14.5  python verify_schedule_slots.py prints first / same_slot=None / a different later_slot, and the
      kit repeats the experiment itself: one signal at 10:00:59 and 10:01:01 → two slots, two jobs
14.6  "", a non-ASCII key and 161 characters: ValueError, and no job, slot or event is written;
      160 ASCII characters are accepted
14.7  the admission gate is filled to its limit (kit rows): a new slot raises CapacityExceeded, the
      existing slot still returns None (that it writes nothing is 14.1's count)
14.8  exercise: four processes (lab14_racer.py) call schedule_once for one fresh key; the kit holds the
      gate table (LOCK TABLES … READ) until the server shows all four waiting at it (or done), then lets
      them go together: exactly one job_id, three None, no error, one slot, one job.  The racers let the
      learner's sessions wait as long as the kit holds, so a slow machine cannot turn the hold into a
      timeout

Every check cleans up the rows it created.  The kit reads the database through its own connections
and never prints credentials.  No server is stopped or restarted.

This file holds the checks; lab14_fixture.py the lab they run in (database view and cleanup, the learner's
calls in the probe and their outcomes, the kit's clock, the time-zone processes, the admission gate) and
lab14_beat.py 14.2's chain (beat, the two workers, the publisher, the probe's events).
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dtmod
import json
import sys
import time
from pathlib import Path
from uuid import uuid4

from lab14_beat import (TICK, drop_leftover_ticks, new_slots, publish_until_sent, queued_ticks, start_chain,
                        tick_chain_runs, wait_finished, wait_first_slot)
from lab14_fixture import (UTC, admission_limit, at_capacity, celery_app, counts, describe, events_of, far_day,
                           first_product, hold_gate, job_ids, learner, outcome, outcome_of, own_rows, remove_jobs,
                           schedule_store, schedule_tasks, slot_keys, slot_of, slots_of_job, state_store, ticks_at,
                           waiting_at_gate, zone_run)

from shared import handshake
from shared.celerylab import LOG_DIR, WORK, log_lines, redact, short
from shared.i18n import t
from shared.labdb import job_row, kit_db, sql
from shared.proc import Process, WaitTimeout, run_python, wait_until
from shared.tap import Check, run


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the box's MariaDB (the kit reads it through its own
    connections); the learner's modules load in the probe (shared/probe.py, lab14_learner.py), never here, and in
    the processes named below."""
    return [
        Check("14.1", check_slot_once, "MariaDB"),
        Check("14.2", check_beat_chain, "celery beat; a fast and a bulk worker; python publisher.py; Redis"),
        Check("14.3", check_utc, "two lab14_zones.py processes, TZ=LAB-8 and TZ=LAB+5"),
        Check("14.4", check_no_backfill, "MariaDB; the task's clock set by the kit"),
        Check("14.5", check_boundary, "MariaDB; python verify_schedule_slots.py"),
        Check("14.6", check_bad_keys, "MariaDB"),
        Check("14.7", check_full_gate, "MariaDB; the admission gate filled with kit rows"),
        Check("14.8", check_race, "MariaDB; four lab14_racer.py processes; a LOCK TABLES hold"),
    ]


# ---------------------------------------------------------------- 14.1

def check_slot_once(c) -> None:
    store = schedule_store()
    product = first_product()
    key = f"kit14-1:{uuid4()}"
    with own_rows():
        before = counts()
        kind1, first = outcome(lambda: store.schedule_once(key, [product]))
        kind2, second = outcome(lambda: store.schedule_once(key, [product]))
        after = counts()
        c.note(t(f"schedule_once('{key[:18]}…', [{product}]) 两次 → {describe(kind1, first)}，{describe(kind2, second)}",
                 f"schedule_once('{key[:18]}…', [{product}]) twice → {describe(kind1, first)}, {describe(kind2, second)}"))
        assert kind1 == "value" and isinstance(first, str) and first, t(
            f"第一次调用应返回 job_id，实际 {describe(kind1, first)}",
            f"the first call should return a job_id, got {describe(kind1, first)}")
        assert kind2 == "value", t(
            f"同一 slot 的第二次调用抛出 {describe(kind2, second)}：先在门闩下查槽，存在就返回 None，不要靠重复键报错",
            f"the second call for the same slot raised {describe(kind2, second)}: look the slot up under the gate and "
            "return None when it exists instead of relying on a duplicate-key error")
        assert second is None, t(f"同一 slot 的第二次调用应返回 None，实际 {describe(kind2, second)}",
                                 f"the second call for the same slot should return None, got {describe(kind2, second)}")
        slot = slot_of(key)
        assert slot is not None and slot["job_id"] == first, t(
            f"export_schedule_slots 里 {key[:18]}… 应指向 {short(first)}，实际 {slot}",
            f"export_schedule_slots should map {key[:18]}… to {short(first)}, found {slot}")
        job = job_row(first)
        assert job is not None and job["status"] == "queued", t(
            f"任务 {short(first)} 应为 queued，实际 {job and job['status']}",
            f"job {short(first)} should be queued, got {job and job['status']}")
        payload = json.loads(job["payload"]) if isinstance(job["payload"], (str, bytes)) else job["payload"]
        assert [row.get("id") for row in payload] == [product], t(
            f"任务 payload 应是商品 {product} 的快照，实际 {str(payload)[:120]}",
            f"the job payload should be the snapshot of product {product}, got {str(payload)[:120]}")
        events = events_of(first)
        assert len(events) == 1 and events[0]["sent_at"] is None, t(
            f"任务 {short(first)} 应恰好有 1 条未发送的 outbox 事件，实际 {len(events)} 条",
            f"job {short(first)} should have exactly 1 unsent outbox event, found {len(events)}")
        grown = {name: after[name] - before[name] for name in after}
        c.note(t(f"新增：任务 {grown['jobs']}，槽 {grown['slots']}，事件 {grown['events']}（queue_name={events[0]['queue_name']}）",
                 f"added: {grown['jobs']} job(s), {grown['slots']} slot(s), {grown['events']} event(s) "
                 f"(queue_name={events[0]['queue_name']})"))
        assert grown == {"jobs": 1, "events": 1, "slots": 1}, t(
            "两次调用应只新增 1 个任务、1 个槽、1 个事件：多出的任务说明重复调用在发现槽已存在前就写了任务，"
            "或捕获了重复键错误却照样提交",
            "the two calls must add exactly 1 job, 1 slot and 1 event: an extra job means the repeat wrote a job "
            "before it found the slot, or caught the duplicate-key error and committed anyway")


# ---------------------------------------------------------------- 14.2

def check_beat_chain(c) -> None:
    celery_app()
    found = learner.call("lab14_learner:tick_entries")  # [name, str(schedule), queue] of each tick entry
    assert found.get("app"), t("celery_app.py 里没有 app", "celery_app.py has no app")
    entries = found.get("entries") or []
    assert entries, t(f"app.conf.beat_schedule 里没有发送 {TICK} 的条目（把课程的 beat 配置放进 celery_app.py）",
                      f"app.conf.beat_schedule has no entry that sends {TICK} (put the lesson's beat settings into "
                      "celery_app.py)")
    name, every, queue = entries[0]
    c.note(t(f"beat_schedule['{name}']：{TICK}，每 {every} 秒，queue={queue}；本检查的 beat 进程里改为每 1 秒",
             f"beat_schedule['{name}']: {TICK} every {every} s, queue={queue}; this check's beat "
             "process uses 1 s instead"))
    schedule_store()
    schedule_tasks()
    before = slot_keys()
    run = uuid4().hex  # every event of the processes below carries it (lab14_probe.py)
    procs: dict[str, Process] = {}
    with own_rows():
        try:
            start_chain(procs, run)
            c.note(t(f"已启动：fast worker（-Q exports.fast）、bulk worker（-Q exports.bulk）、一个 beat（pid "
                     f"{procs['beat'].pid}，调度文件在检查器日志目录）",
                     f"started: the fast worker (-Q exports.fast), the bulk worker (-Q exports.bulk) and one beat "
                     f"(pid {procs['beat'].pid}, its schedule file in the kit's log dir)"))

            got = wait_first_slot(c, procs, before, run, queue)
            job_id = got["job_id"]
            c.note(t(f"tick → 新槽 {got['slot_key']} → 任务 {short(job_id)}",
                     f"tick → new slot {got['slot_key']} → job {short(job_id)}"))
            events = events_of(job_id)
            assert len(events) == 1, t(f"该任务应有 1 条 outbox 事件，实际 {len(events)}",
                                       f"the job should have 1 outbox event, found {len(events)}")
            line = publish_until_sent(c, events[0]["id"])
            c.note(f"python publisher.py → {line}")
            row = wait_finished(job_id)
            assert row["status"] == "succeeded" and row["result_ref"], t(
                f"任务结束于 {row['status']}", f"the job ended {row['status']}")
            path = Path(row["result_ref"])
            path = path if path.is_absolute() else WORK / path
            assert path.is_file(), t(f"result_ref 指向的文件不存在：{row['result_ref']}",
                                     f"the file result_ref names does not exist: {row['result_ref']}")
            written = json.loads(path.read_text(encoding="utf-8"))
            payload = json.loads(row["payload"]) if isinstance(row["payload"], (str, bytes)) else row["payload"]
            assert [r.get("id") for r in written] == [r.get("id") for r in payload], t(
                "文件内容不是任务的 payload 快照", "the file does not hold the job's payload snapshot")
            c.note(t(f"任务 succeeded，文件 {path.name[:44]} 含 {len(written)} 个商品",
                     f"job succeeded, file {path.name[:44]} holds {len(written)} products"))

            ticks, made, exports = tick_chain_runs(run, job_id)
            assert made, t("没有哪个 tick 的返回值是这个任务：槽是在 worker 外创建的吗？",
                           "no tick returned this job: was the slot created outside the worker?")
            beat_pid = procs["beat"].pid
            assert all(e.get("pid") != beat_pid for e in ticks), t("beat 进程自己执行了 tick", "the beat process ran a tick itself")
            assert exports, t("bulk worker 没有收到该任务的导出消息", "the bulk worker never received this job's export")
            sent = log_lines(procs["beat"].log_text(), "Sending due task", limit=1000)
            c.note(t(f"beat 发送 {len(sent)} 次；tick 在 {ticks[0].get('worker')} 执行（队列 {ticks[0].get('queue')}），"
                     f"导出在 {exports[0].get('worker')}（队列 {exports[0].get('queue')}）",
                     f"beat sent {len(sent)} tick(s); ticks ran on {ticks[0].get('worker')} (queue "
                     f"{ticks[0].get('queue')}), the export on {exports[0].get('worker')} (queue {exports[0].get('queue')})"))
            procs["beat"].stop(grace=5)
            with contextlib.suppress(WaitTimeout):  # the fast worker takes the last ticks (bounded)
                wait_until(lambda: not queued_ticks(), 5, "the last ticks to be taken", interval=0.1)
            slots = new_slots(before)
            minutes = sorted({time.strftime("%H:%M", time.gmtime(e["at"])) for e in ticks})
            c.note(t(f"{len(ticks)} 个 tick 跨 {len(minutes)} 个 UTC 分钟（{', '.join(minutes)}）→ {len(slots)} 个槽："
                     "同一分钟的 tick 合并",
                     f"{len(ticks)} tick(s) over {len(minutes)} UTC minute(s) ({', '.join(minutes)}) → {len(slots)} "
                     "slot(s): ticks of one minute merge"))
        finally:
            for proc in procs.values():
                proc.stop(grace=8)
            drop_leftover_ticks()


# ---------------------------------------------------------------- 14.3

def check_utc(c) -> None:
    tasks = schedule_tasks()
    kind, value = outcome(lambda: tasks.execution_slot(dtmod.datetime(2026, 1, 1, 10, 0, 59)))
    c.note(t(f"execution_slot(datetime(2026,1,1,10,0,59))（无时区）→ {describe(kind, value)}",
             f"execution_slot(datetime(2026,1,1,10,0,59)) (naive) → {describe(kind, value)}"))
    assert kind == "error" and isinstance(value, (ValueError, TypeError)), t(
        "无时区的 datetime 应被拒绝（ValueError）：tzinfo 为 None 时不要猜它是哪个时区",
        "a naive datetime must be refused (ValueError): do not guess the zone when tzinfo is None")
    runs = {tz: zone_run(tz) for tz in ("LAB-8", "LAB+5")}
    results = {}
    try:
        for tz, proc in runs.items():
            wait_until(lambda: not proc.alive(), 30, f"the time-zone probe (TZ={tz})", interval=0.05)
            found = [line for line in proc.log_text().splitlines() if line.startswith("SLOTS ")]
            assert found, t(f"TZ={tz} 下导入 schedule_tasks 失败：\n", f"importing schedule_tasks under TZ={tz} failed:\n") \
                + redact(proc.log_tail(6))
            results[tz] = json.loads(found[-1][6:])
    finally:
        for proc in runs.values():
            proc.stop(grace=2)
    east, west = results["LAB-8"], results["LAB+5"]
    c.note(t(f"本地时区 UTC+8 的进程：18:00:59+08:00 → {east['plus8']}，10:00:59Z → {east['utc']}，"
             f"05:00:59-05:00 → {east['minus5']}",
             f"process in local zone UTC+8: 18:00:59+08:00 → {east['plus8']}, 10:00:59Z → {east['utc']}, "
             f"05:00:59-05:00 → {east['minus5']}"))
    errors = sorted({v for r in (east, west) for k, v in r.items() if k != "naive" and v.startswith("error: ")})
    assert not errors, t(f"带时区的时间也报错：{errors[0]}", f"an aware datetime raised: {errors[0]}")
    for name, result in (("UTC+8", east), ("UTC-5", west)):
        assert result["naive"].startswith("refused"), t(
            f"本地时区 {name} 的进程接受了无时区时间（{result['naive']}）",
            f"a process in local zone {name} accepted a naive datetime ({result['naive']})")
        assert result["plus8"] == result["utc"] == result["minus5"], t(
            f"同一时刻（18:00:59+08:00 = 10:00:59Z = 05:00:59-05:00）得到不同槽名：{result['plus8']} / {result['utc']} / "
            f"{result['minus5']}：先 astimezone(timezone.utc) 再格式化",
            f"one instant (18:00:59+08:00 = 10:00:59Z = 05:00:59-05:00) gave different slot names: {result['plus8']} / "
            f"{result['utc']} / {result['minus5']}: convert with astimezone(timezone.utc) before formatting")
        assert result["new_year_plus8"] == result["new_year_utc"], t(
            f"2026-01-01 03:30+08:00 与 2025-12-31 19:30Z 是同一时刻，槽名却不同：{result['new_year_plus8']} / "
            f"{result['new_year_utc']}",
            f"2026-01-01 03:30+08:00 and 2025-12-31 19:30Z are one instant but got {result['new_year_plus8']} / "
            f"{result['new_year_utc']}")
        assert result["wall_as_utc"] != result["utc"], t(
            "18:00:59Z 与 10:00:59Z 得到同一个槽名：槽名没有随 UTC 时刻变化",
            "18:00:59Z and 10:00:59Z got the same slot name: the name does not follow the UTC instant")
    assert east == west, t(
        f"进程的本地时区改变了槽名（UTC+8：{east['utc']}，UTC-5：{west['utc']}）：不要用 astimezone() 或本地时间",
        f"the process's local zone changed the slot names (UTC+8: {east['utc']}, UTC-5: {west['utc']}): do not use "
        "astimezone() without a zone, or local time")
    c.note(t("本地时区 UTC-5 的进程得到完全相同的槽名；跨日期的同一时刻也相同",
             "a process in local zone UTC-5 got exactly the same names; one instant across the date line too"))


# ---------------------------------------------------------------- 14.4

def check_no_backfill(c) -> None:
    tasks = schedule_tasks()
    schedule_store()
    minute = dtmod.timedelta(minutes=1)
    day = far_day()
    runs = [day + dtmod.timedelta(seconds=30), day + 3 * minute + dtmod.timedelta(seconds=10)]
    window = {tasks.execution_slot(day + k * minute + dtmod.timedelta(seconds=30)): k for k in range(-10, 14)}
    executed = [tasks.execution_slot(when) for when in runs]
    stopped = {tasks.execution_slot(day + k * minute + dtmod.timedelta(seconds=30)) for k in (1, 2)} - set(executed)
    with own_rows() as before:
        results = ticks_at(runs)
        for when, (kind, value) in zip(runs, results):
            c.note(t(f"时钟 {when:%Y-%m-%d %H:%M:%S}Z：schedule_tick() → {describe(kind, value)}",
                     f"clock at {when:%Y-%m-%d %H:%M:%S}Z: schedule_tick() → {describe(kind, value)}"))
            assert kind == "value", t(f"schedule_tick 出错：{describe(kind, value)}",
                                      f"schedule_tick failed: {describe(kind, value)}")
        c.note(t(f"两次执行之间 beat“停止”：{day + minute:%H:%M} 与 {day + 2 * minute:%H:%M} 没有任何 tick",
                 f"beat 'stopped' between the two runs: no tick at all in {day + minute:%H:%M} and "
                 f"{day + 2 * minute:%H:%M}"))
        marks = ",".join(["%s"] * len(window))
        present = sorted((r["slot_key"] for r in sql(
            f"SELECT slot_key FROM export_schedule_slots WHERE slot_key IN ({marks})", list(window))),
            key=lambda k: window[k])
        start, end = f"{day - 10 * minute:%H:%M}", f"{day + 13 * minute:%H:%M}"
        c.note(t(f"{start} 到 {end} 之间的槽：{', '.join(present) or '无'}",
                 f"slots from {start} to {end}: {', '.join(present) or 'none'}"))
        missing = [k for k in executed if k not in present]
        assert not missing, t(
            f"执行过的分钟没有槽：{missing[0]}：schedule_tick 要用开始执行时的 datetime.now(timezone.utc) 命名槽",
            f"a minute that ran has no slot: {missing[0]}: schedule_tick must name the slot from "
            "datetime.now(timezone.utc) when it runs")
        extra = [k for k in present if k not in executed]
        assert not extra, t(
            f"出现了没有执行过的分钟的槽：{', '.join(extra)}——停机期间的分钟被补建或记为已执行；本模型不补跑",
            f"slots exist for minutes that never ran: {', '.join(extra)} — minutes while beat was stopped were "
            "back-filled or recorded as run; this model does not catch up")
        assert not stopped & set(present), t("停机分钟出现了槽", "a stopped minute has a slot")
        new = job_ids() - before
        assert len(new) == len(set(present)), t(
            f"新增了 {len(new)} 个任务，却只有 {len(set(present))} 个槽：每个任务都应属于一个执行过的槽",
            f"{len(new)} new job(s) but only {len(set(present))} slot(s): every job must belong to a minute that ran")
        c.note(t(f"停机的分钟 {', '.join(sorted(stopped)) or '（与执行分钟同名）'} 没有槽，也没有任务",
                 f"the stopped minutes {', '.join(sorted(stopped)) or '(same names as the runs)'} have no slot and no job"))


# ---------------------------------------------------------------- 14.5

def check_boundary(c) -> None:
    store = schedule_store()
    tasks = schedule_tasks()
    product = first_product()
    with own_rows():
        # The kit's own experiment first: its finding names the mistake (the slot's minute); the learner's
        # script failing on the same mistake would only say that it failed.
        prefix = f"kit14-5:{uuid4()}:"
        late = dtmod.datetime(2026, 1, 1, 10, 0, 59, tzinfo=UTC)
        next_minute = dtmod.datetime(2026, 1, 1, 10, 1, 1, tzinfo=UTC)
        keys = [prefix + tasks.execution_slot(late), prefix + tasks.execution_slot(late),
                prefix + tasks.execution_slot(next_minute)]
        got = [outcome(lambda key=key: store.schedule_once(key, [product])) for key in keys]
        c.note(t("同一模拟信号在 10:00:59、10:00:59、10:01:01 执行 → " + "，".join(describe(*g) for g in got),
                 "one simulated signal executed at 10:00:59, 10:00:59, 10:01:01 → " + ", ".join(describe(*g) for g in got)))
        assert all(kind == "value" for kind, _ in got), t("schedule_once 出错（见上方）", "schedule_once failed (see above)")
        a, b, later_kit = (value for _, value in got)
        assert a and b is None, t("同一分钟的第二次执行应返回 None", "the second run in the same minute should return None")
        assert later_kit and later_kit != a, t(
            "下一分钟的执行应得到新的槽和新的任务：槽名要包含执行的分钟（%Y%m%dT%H%M）",
            "the run in the next minute should get a new slot and a new job: the slot name must carry the minute "
            "of execution (%Y%m%dT%H%M)")
        rows = sql("SELECT slot_key, job_id FROM export_schedule_slots WHERE slot_key LIKE %s ORDER BY slot_key",
                   (prefix + "%",))
        assert len(rows) == 2 and len({r["job_id"] for r in rows}) == 2, t(
            f"应有 2 个槽对应 2 个不同任务，实际 {len(rows)} 个槽", f"expected 2 slots with 2 different jobs, found {len(rows)}")
        c.note(t(f"2 个槽：{rows[0]['slot_key'][len(prefix):]} 与 {rows[1]['slot_key'][len(prefix):]}，2 个任务——"
                 "按执行分钟合并，不是按信号恰好一次",
                 f"2 slots: {rows[0]['slot_key'][len(prefix):]} and {rows[1]['slot_key'][len(prefix):]}, 2 jobs — "
                 "merged per execution minute, not exactly-once per signal"))

        # Then the learner's own script, as the course runs it.
        assert (WORK / "verify_schedule_slots.py").is_file(), t("文件夹里没有 verify_schedule_slots.py",
                                                                "verify_schedule_slots.py is missing from the folder")
        done = run_python(["verify_schedule_slots.py"], cwd=WORK, timeout=30)
        output = redact(done.stdout)
        lines = [x for x in output.strip().splitlines() if x.strip()]
        if done.returncode != 0:
            for line in lines[-4:]:
                c.note("  " + line[:200])
        assert done.returncode == 0, t("python verify_schedule_slots.py 失败（见下方输出）",
                                       "python verify_schedule_slots.py failed (see the output below)")
        printed = [x for x in lines if "same_slot" in x and "{" in x]
        assert printed, t("verify_schedule_slots.py 没有打印 first / same_slot / later_slot",
                          "verify_schedule_slots.py did not print first / same_slot / later_slot")
        try:
            shown = ast.literal_eval(printed[-1][printed[-1].index("{"):])
        except (ValueError, SyntaxError):
            raise AssertionError(t(f"无法读取输出：{printed[-1][:160]}", f"cannot read the output: {printed[-1][:160]}")) \
                from None
        c.note("python verify_schedule_slots.py → " + printed[-1][:60] + "…")
        first, same, later = shown.get("first"), shown.get("same_slot"), shown.get("later_slot")
        assert first and same is None and later and later != first, t(
            f"脚本输出应为 first=编号、same_slot=None、不同的 later_slot，实际 {shown}",
            f"the script should print first=an id, same_slot=None and a different later_slot, got {shown}")
        script_slots = [slots_of_job(first), slots_of_job(later)]
        assert all(len(s) == 1 for s in script_slots) and script_slots[0] != script_slots[1], t(
            f"脚本的两个任务应各有一个不同的槽，实际 {script_slots}",
            f"the script's two jobs should each have their own slot, found {script_slots}")
        assert all(len(events_of(j)) == 1 for j in (first, later)), t("脚本的两个任务应各有 1 条 outbox 事件",
                                                                       "each of the script's jobs needs 1 outbox event")
        names = [s[0].split(":", 2)[-1] for s in script_slots]  # without the script's drill:<uuid>: prefix
        c.note(t(f"脚本的两个任务各有槽：…{names[0]}，…{names[1]}",
                 f"the script's jobs have one slot each: …{names[0]}, …{names[1]}"))


# ---------------------------------------------------------------- 14.6

def check_bad_keys(c) -> None:
    store = schedule_store()
    product = first_product()
    cases = [("", t("空字符串", "empty")), ("drill:槽-é", t("非 ASCII", "non-ASCII")),
             ("k" * 161, t("161 个字符", "161 characters"))]
    with own_rows():
        before = counts()
        # Each call with the transactions it opens counted, in the probe (lab14_learner.schedule_once_counting).
        for key, label in cases:
            seen = learner.call("lab14_learner:schedule_once_counting", key, [product])
            opened = seen.get("opened")
            kind, value = outcome_of(seen)
            where = t("，未打开事务" if not opened else "，已打开事务", ", no transaction opened" if not opened
                      else ", after opening a transaction")
            c.note(f"{label}: {describe(kind, value)}" + (where if kind == "error" else ""))
            assert kind == "error", t(f"{label} 的 slot_key 被接受了（返回 {describe(kind, value)}）",
                                      f"the {label} slot_key was accepted (returned {describe(kind, value)})")
            assert value.is_a("ValueError"), t(
                f"{label} 的 slot_key 应得到明确的 ValueError，实际 {describe(kind, value)}：在打开事务前检查 "
                "isascii() 和 1..160 的长度，不要等数据库报错",
                f"the {label} slot_key should raise a clear ValueError, got {describe(kind, value)}: check "
                "isascii() and the 1..160 length before opening the transaction instead of waiting for the database")
            assert counts() == before, t(f"{label} 的调用写入了数据", f"the {label} call wrote rows")
        c.note(t("三次都没有新增任务、槽或事件", "none of the three added a job, slot or event"))
        kind, value = outcome(lambda: store.schedule_once("k" * 160, [product]))
        c.note(t(f"160 个 ASCII 字符 → {describe(kind, value)}", f"160 ASCII characters → {describe(kind, value)}"))
        assert kind == "value" and value, t("160 个 ASCII 字符的 slot_key 应被接受（上限含 160）",
                                            "a slot_key of 160 ASCII characters must be accepted (the limit includes 160)")


# ---------------------------------------------------------------- 14.7

def check_full_gate(c) -> None:
    store = schedule_store()
    state_store()
    assert learner.call("lab14_learner:has_capacity_exceeded") is True, t(
        "state_store 里没有 CapacityExceeded", "state_store has no CapacityExceeded")
    product = first_product()
    key = f"kit14-7:{uuid4()}"
    limit = admission_limit()
    fillers: list[str] = []
    with own_rows():
        try:
            kind, first = outcome(lambda: store.schedule_once(key, [product]))
            assert kind == "value" and first, t(f"门闩未满时第一次调用应返回 job_id，实际 {describe(kind, first)}",
                                                f"with room left the first call should return a job_id, got "
                                                f"{describe(kind, first)}")
            active = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')")[0]["n"]
            fillers = [str(uuid4()) for _ in range(max(0, limit - int(active)))]
            with kit_db() as cur:
                cur.executemany("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                                "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(f,) for f in fillers])
            c.note(t(f"门闩上限 {limit}：检查器补了 {len(fillers)} 个 queued 任务，queued+running = {limit}",
                     f"admission limit {limit}: the kit added {len(fillers)} queued job(s), queued+running = {limit}"))
            kind, fresh = at_capacity(f"kit14-7:{uuid4()}:fresh", product)
            c.note(t(f"新槽 → {describe(kind, fresh)}", f"a new slot → {describe(kind, fresh)}"))
            assert kind == "error" and fresh.is_a("CapacityExceeded"), t(
                f"门闩已满时新槽应抛 CapacityExceeded，实际 {describe(kind, fresh)}：新槽要先过 admit_export",
                f"with the gate full a new slot should raise CapacityExceeded, got {describe(kind, fresh)}: a new "
                "slot must pass admit_export")
            kind, again = at_capacity(key, product)
            c.note(t(f"已存在的槽 → {describe(kind, again)}", f"the existing slot → {describe(kind, again)}"))
            assert not (kind == "error" and again.is_a("CapacityExceeded")), t(
                "已存在的槽在门闩已满时报了容量错误：先锁门闩、查槽，存在就返回 None，admit_export 放在槽检查之后",
                "the existing slot got a capacity error with the gate full: lock the gate, look the slot up and "
                "return None if found; call admit_export after the slot check")
            assert kind == "value" and again is None, t(f"已存在的槽应返回 None，实际 {describe(kind, again)}",
                                                        f"the existing slot should return None, got {describe(kind, again)}")
        finally:
            remove_jobs(fillers)


# ---------------------------------------------------------------- 14.8

def check_race(c) -> None:
    schedule_store()
    product = first_product()
    key = f"kit14-8:{uuid4()}"
    names = [f"R{k}" for k in range(4)]
    folder = LOG_DIR / f"lab14-race-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    with own_rows():
        procs = {name: Process([sys.executable, str(WORK / "lab14_racer.py"), str(folder), name, key, str(product)],
                               cwd=WORK, log_path=folder / f"{name}.log") for name in names}
        try:
            wait_until(lambda: all((folder / f"ready-{n}").exists() or not p.alive() for n, p in procs.items()), 30,
                       "the four processes to import schedule_store", interval=0.02)
            dead = [p for p in procs.values() if not p.alive()]
            assert not dead, t("schedule_once 子进程启动失败：\n", "a schedule_once process failed to start:\n") \
                + redact(dead[0].log_tail(6))

            def answered() -> int:
                return sum((folder / f"res-{n}-1").exists() for n in names)  # shared/handshake.py's result file

            with hold_gate():
                handshake.go(folder, names)
                try:  # every racer waits at the gate, or (a design without the gate) has already answered
                    wait_until(lambda: waiting_at_gate() + answered() >= len(names), 30,
                               "all four to wait at the gate", interval=0.02)
                except WaitTimeout:
                    c.note(t("  （30 秒内没有看到 4 个进程都在门闩前等待；照常放行）",
                             "  (not all four were seen waiting at the gate within 30 s; released anyway)"))
                queued = waiting_at_gate()
            results = [handshake.wait_result(folder, name, 30) for name in names]
        finally:
            handshake.stop(folder)
            for proc in procs.values():
                proc.stop(grace=3)
        winners = [r["job"] for r in results if r.get("job")]
        nones = [r for r in results if "job" in r and r["job"] is None]
        errors = [r["error"] for r in results if r.get("error")]
        n = len(names)
        c.note(t(f"{n} 个进程（{queued} 个同时等在门闩前）→ {len(winners)} 个 job_id，{len(nones)} 个 None，{len(errors)} 个错误",
                 f"{n} processes ({queued} lined up at the gate together) → {len(winners)} job_id(s), {len(nones)} None, "
                 f"{len(errors)} error(s)"))
        assert not errors, t(
            f"schedule_once 抛出 {redact(errors[0])}：多个进程都通过了槽检查。所有调用先锁同一门闩，再查槽",
            f"schedule_once raised {redact(errors[0])}: several processes passed the slot check. Every call must lock "
            "the same gate first, then look the slot up")
        assert len(winners) == 1 and len(nones) == n - 1, t(
            f"应恰好 1 个 job_id 和 {n - 1} 个 None", f"expected exactly 1 job_id and {n - 1} None")
        slot = slot_of(key)
        assert slot and slot["job_id"] == winners[0], t("槽没有指向唯一的赢家", "the slot does not point at the one winner")
        c.note(t(f"槽 {key[:16]}… → 任务 {short(winners[0])}，只有这一个", f"slot {key[:16]}… → job {short(winners[0])}, "
                 "the only one"))


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    run(checks())
