"""Lesson 15's checks of the delivery side (not a lesson file): a sent but never claimed job re-dispatched
once, with two scanners at once (15.4); duplicate deliveries during the backoff (15.5); the publisher's
confirm (15.6); a worker's warm shutdown with a job in flight (15.7).  verify_lesson15.py runs them; the lab
is lab15_fixture.py, the drills lab15_drills.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

from lab15_drills import (Helpers, add_overdue, all_locked_message, overdue, own_worker_argv, pending_counts,
                          row_lock_error, time_passes)
from lab15_fixture import (TERMINAL, UUID_RE, celery_app, hold, make_due, parked, payload_of, publish_after_takeover,
                           publish_event, published_payload, publisher, recovery, release, remove_jobs, retire,
                           run_script, same_rows, scan, send, server_now, shown, store, task_end, token_of, unsent,
                           wait_end, wait_hold)

from shared.celerylab import DeclaredWorker, children_of, short, start_worker
from shared.i18n import t
from shared.labdb import (held_by_others, job_row, lock_waits, make_marks_table, one_line, plan_of, sql, trigger,
                          wait_status)
from shared.proc import WaitTimeout, wait_until

MARKS = "lab15_kit_marks"


# ---------------------------------------------------------------- 15.4

def check_unclaimed(c) -> None:
    st = store()
    rec = recovery()
    jobs: list[str] = []
    crowd: list[str] = []
    try:
        code, output, lines = run_script(c, ["verify_queued_recovery.py"])
        found = re.findall(rf"queued delivery recovery verified\s+({UUID_RE})", output)
        c.note("python verify_queued_recovery.py → " + (lines[-1] if lines else t("（无输出）", "(no output)")))
        if code != 0 or not found:
            for line in lines[-4:-1]:
                c.note("  " + line)
        assert code == 0 and found, t("verify_queued_recovery.py 没有打印 queued delivery recovery verified（见上方输出）",
                                      "verify_queued_recovery.py did not print queued delivery recovery verified "
                                      "(see the output above)")
        jobs.append(found[-1])
        assert len(unsent(found[-1])) == 1, t("脚本的任务应恰好有 1 条未发送事件", "the script's job should have "
                                               "exactly 1 unsent event")

        lost, recent = st.submit_snapshot([31]), st.submit_snapshot([32])
        jobs += [lost, recent]
        overdue(lost, 61)
        overdue(recent, 20)
        scan(rec)
        scan(rec)
        first = len(unsent(lost))
        # The publisher stays down: the new event is not sent, and another minute goes by.
        time_passes(lost, 61)
        scan(rec)
        scan(rec)
        row, got, control = job_row(lost), unsent(lost), unsent(recent)
        c.note(t(f"61 秒前已发送、从未领取：两次 recover_batch() 后未发送事件 {first} 条；publisher 仍停着、再过 61 秒"
                 f"（时间用 UPDATE 前移）后又扫描两次：{len(got)} 条，{row['status']}，attempts={row['attempts']}；"
                 f"20 秒前发送的对照任务：{len(control)} 条",
                 f"sent 61 s ago, never claimed: after two recover_batch() calls {first} unsent event(s); with the "
                 f"publisher still down and another 61 s gone by (times moved back with UPDATEs), two more scans: "
                 f"{len(got)}, {row['status']}, attempts={row['attempts']}; control job sent 20 s ago: {len(control)}"))
        assert first == 1, t(f"第一次扫描后应恰好 1 条新的未发送事件，实际 {first} 条",
                             f"the first scan should add exactly 1 unsent event, found {first}")
        assert len(got) == 1, t(
            f"应恰好 1 条新的未发送事件，实际 {len(got)} 条：扫描要用 NOT EXISTS 排除已有未发送事件的任务",
            f"expected exactly 1 new unsent event, found {len(got)}: the scan must skip jobs that already have an "
            "unsent event (NOT EXISTS)")
        assert row["status"] == "queued" and row["attempts"] == 0, t(
            f"补发不是执行：应仍为 queued/0，实际 {row['status']}/{row['attempts']}",
            f"a re-dispatch is not an execution: expected queued/0, got {row['status']}/{row['attempts']}")
        assert not control, t("20 秒前刚派发的任务也被补发了：要等 60 秒未领取", "a job dispatched 20 s ago was "
                              "re-dispatched too: wait for the 60 s unclaimed budget")

        # -- two scanners at once: the second must find other jobs, not wait and not find all locked
        crowd = add_overdue(120)
        scanners = Helpers("scan", ["A", "B"])
        try:
            # A stops inside its batch right after its first locking statement, its transaction open.
            scanners.go("A", {"hold": True})
            held = scanners.wait_held("A")
            assert held, t("扫描器 A 的 recover_batch() 没有加锁的语句（SELECT … FOR UPDATE SKIP LOCKED）就结束了："
                           "两个扫描器会恢复同一批任务",
                           "scanner A's recover_batch() finished without a statement that takes a row lock "
                           "(SELECT … FOR UPDATE SKIP LOCKED): two scanners would recover the same jobs")
            # B runs while A holds every lock it took: if B needed any of them it could not return now.
            scanners.go("B", {})
            got_b = scanners.result("B", 20)
            locked = held_by_others("export_jobs", crowd)
            plan = plan_of(held["statement"], "export_jobs", "j")  # same rows, same moment as A's own read
            waits = lock_waits() if got_b is None else []
            scanners.release("A")
            got_a = scanners.result("A", 20)
        finally:
            scanners.stop()
        shown_b = got_b and got_b.get("value", got_b.get("error"))
        c.note(t(f"120 个逾期任务；扫描器 A 停在批次事务里，刚执行完：{one_line(held['statement'])}",
                 f"120 overdue jobs; scanner A held inside its batch, right after: {one_line(held['statement'])}"))
        c.note(t(f"EXPLAIN（A 的扫描）：{plan['line']}", f"EXPLAIN of A's scan: {plan['line']}"))
        c.note(t(f"A 持锁期间：120 个逾期任务中有 {locked} 个被 A 锁住；A 仍持锁时扫描器 B → {shown_b}；之后 A → "
                 f"{got_a and got_a.get('value', got_a.get('error'))}",
                 f"while A holds its batch: {locked} of the 120 overdue jobs are locked by A; with A still holding "
                 f"them, scanner B → {shown_b}; then A → {got_a and got_a.get('value', got_a.get('error'))}"))
        assert got_b is not None, t(
            "扫描器 A 持有批次时，扫描器 B 没有返回：它在等 A 的锁" + (f"（innodb_trx：{waits[0]}）" if waits else "")
            + "。用 FOR UPDATE SKIP LOCKED", "scanner B did not return while A held its batch: it is waiting for A's "
            "locks" + (f" (innodb_trx: {waits[0]})" if waits else "") + ". Use FOR UPDATE SKIP LOCKED")
        assert "error" not in got_b, t(f"扫描器 B 出错：{got_b['error']}（在等 A 的锁？用 FOR UPDATE SKIP LOCKED）",
                                       f"scanner B failed: {got_b['error']} (waiting for A's locks? use FOR UPDATE "
                                       "SKIP LOCKED)")
        assert isinstance(got_b["value"], int), t(f"recover_batch() 应返回处理数量，实际 {got_b['value']!r}",
                                                  f"recover_batch() should return how many jobs it changed, got "
                                                  f"{got_b['value']!r}")
        assert got_b["value"] > 0, all_locked_message(held["statement"], plan, locked, len(crowd))
        assert got_a and isinstance(got_a.get("value"), int), t(f"扫描器 A 出错：{got_a}", f"scanner A failed: {got_a}")
        for _ in range(5):
            if not scan(rec):
                break
        counts = pending_counts(crowd)
        spread = sorted(set(counts.values()))
        c.note(t(f"继续扫描直到没有可恢复的任务：120 个任务每个的未发送事件数 {spread}",
                 f"scanning on until nothing is left: unsent events per job over the 120 jobs: {spread}"))
        assert spread == [1], t(f"每个逾期任务应恰好 1 条新事件，实际分布 {spread}",
                                f"every overdue job should get exactly 1 new event, got {spread}")
    finally:
        retire(jobs)
        if crowd:
            remove_jobs(crowd)


# ---------------------------------------------------------------- 15.5

def check_retry_gate(c) -> None:
    st = store()
    app = celery_app()
    DeclaredWorker()
    jobs: list[str] = []
    try:
        # The kit's own duplicates first: its finding names the mistake (the claim's backoff condition); the
        # course's script failing on the same mistake would only say that it failed.
        job_id = st.submit_snapshot([41])
        jobs.append(job_id)
        # An hour, not the script's 10 s: the backoff must still hold however slowly the messages are handled.
        sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 1 HOUR) WHERE id=%s", (job_id,))
        ends = [wait_end(task) for task in [send(app, job_id) for _ in range(3)]]
        direct = [st.claim(job_id) for _ in range(2)]
        row = job_row(job_id)
        c.note(t("next_attempt_at 在一小时后：3 条重复消息经 worker → "
                 + "，".join(shown(e) for e in ends)
                 + f"；2 次 claim() → {[token_of(j) for j in direct]}；行 {row['status']}，attempts={row['attempts']}",
                 "next_attempt_at an hour ahead: 3 duplicate messages through the worker → "
                 + ", ".join(shown(e) for e in ends)
                 + f"; 2 claim() calls → {[token_of(j) for j in direct]}; row {row['status']}, attempts={row['attempts']}"))
        assert direct == [None, None] and row["status"] == "queued" and row["attempts"] == 0, t(
            "退避未到时重复消息领取了任务或增加了 attempts：claim 的 SELECT 与 UPDATE 都要带 next_attempt_at<=NOW(6)",
            "a duplicate claimed the job or raised attempts during the backoff: both the SELECT and the UPDATE in "
            "claim need next_attempt_at<=NOW(6)")
        make_due(job_id)
        wait_end(send(app, job_id))
        row = wait_status(job_id, TERMINAL, 15)
        c.note(t(f"next_attempt_at 移到过去后 1 条消息 → {row['status']}，attempts={row['attempts']}",
                 f"next_attempt_at moved into the past, 1 message → {row['status']}, attempts={row['attempts']}"))
        assert row["status"] == "succeeded" and row["attempts"] == 1, t(
            f"到期后应领取一次并成功（attempts=1），实际 {row['status']}/{row['attempts']}",
            f"once due one claim should succeed with attempts 1, got {row['status']}/{row['attempts']}")

        # Then the course's own script, its sleeps fast-forwarded.
        code, output, lines = run_script(c, ["lab15_tools.py", "fast-forward"])
        printed = [line for line in lines if not line.startswith("LAB15-FAST-FORWARD")]
        info = next((json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("LAB15-FAST-FORWARD")),
                    {"jobs": [], "seconds": 0})
        jobs += info["jobs"]
        c.note(t(f"python verify_retry_gate.py（sleep 快进 {info['seconds']} 秒）→ " + (printed[-1] if printed else "（无输出）"),
                 f"python verify_retry_gate.py (sleeps fast-forwarded by {info['seconds']} s) → "
                 + (printed[-1] if printed else "(no output)")))
        if code != 0:
            for line in printed[-4:-1]:
                c.note("  " + line)
        assert code == 0 and any("persistent retry gate verified" in line for line in printed), t(
            "verify_retry_gate.py 没有打印 persistent retry gate verified（见上方输出）",
            "verify_retry_gate.py did not print persistent retry gate verified (see the output above)")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- 15.6

def check_confirm(c) -> None:
    st = store()
    pub = publisher()
    jobs: list[str] = []
    try:
        # -- normal publish: both times, close together
        job_id = st.submit_snapshot([51])
        jobs.append(job_id)
        event = unsent(job_id)[0]
        before = server_now()
        result = publish_event(pub, event["id"])
        after = server_now()
        sent = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event["id"],))[0]["sent_at"]
        row = job_row(job_id)
        c.note(t(f"publish_one() → {result}：sent_at={sent}，任务 last_dispatched_at={row['last_dispatched_at']}",
                 f"publish_one() → {result}: sent_at={sent}, the job's last_dispatched_at={row['last_dispatched_at']}"))
        assert result is True, t(f"确认成功时 publish_one() 应返回 True，实际 {result!r}",
                                 f"publish_one() should return True when confirmed, got {result!r}")
        assert row["last_dispatched_at"] is not None and before <= row["last_dispatched_at"] <= after, t(
            "确认发送时没有同时写入任务的 last_dispatched_at", "the confirm did not record the job's last_dispatched_at")

        # -- lock order: job first, outbox second.  A publisher process stops right after the first statement
        # that takes a lock once its message is sent (the confirm's first lock) and holds it while the kit
        # looks which of the two rows is locked: a fact, whatever the machine's speed.
        job_id = st.submit_snapshot([52])
        jobs.append(job_id)
        event = unsent(job_id)[0]
        with parked({event["id"]}):
            helper = Helpers("publish", ["P"])
            try:
                helper.go("P", {"hold": True})
                held = helper.wait_held("P")
                job_lock = row_lock_error("export_jobs", job_id) if held else None
                outbox_lock = row_lock_error("export_outbox", event["id"]) if held else None
                helper.release("P")
                got = helper.result("P", 20)
            finally:
                helper.stop()
        shown_got = got and got.get("value", got.get("error"))
        if held:
            c.note(t(f"发送之后，确认事务的第一条加锁语句：{one_line(held['statement'])}；此时任务行"
                     f"{'已被锁住' if job_lock else '未锁'}，outbox 行{'已被锁住' if outbox_lock else '未锁'}；"
                     f"放行后 publish_one() → {shown_got}",
                     f"after the send, the confirm's first locking statement: {one_line(held['statement'])}; at that "
                     f"point the job row is {'locked' if job_lock else 'free'} and the outbox row "
                     f"{'locked' if outbox_lock else 'free'}; released, publish_one() → {shown_got}"))
        assert held, t(f"发送之后 publish_one() 没有任何加锁的语句（→ {shown_got}）：确认事务要先 "
                       "SELECT … FROM export_jobs … FOR UPDATE，再更新 outbox 和 last_dispatched_at",
                       f"after the send publish_one() ran no statement that takes a lock (→ {shown_got}): the confirm "
                       "must SELECT … FROM export_jobs … FOR UPDATE first, then update the outbox and "
                       "last_dispatched_at")
        assert outbox_lock is None, t(
            "确认事务先锁了 outbox 行：与恢复扫描的顺序（先 job 后 outbox）相反，两者会互相等待；先锁 job，再改 outbox",
            "the confirm locked the outbox row first — the recovery scan's order (job, then outbox) reversed, so the "
            "two can deadlock; lock the job first, then update the outbox")
        assert job_lock is not None, t(
            "确认事务的第一条加锁语句没有锁住任务行：先 SELECT … FROM export_jobs … FOR UPDATE，再更新 outbox",
            "the confirm's first locking statement did not lock the job row: SELECT … FROM export_jobs … FOR UPDATE "
            "first, then update the outbox")
        assert got and got.get("value") is True, t(f"放行后确认应成功（publish_one() → True），实际 {shown_got}",
                                                   f"released, the confirm should succeed (publish_one() → True), "
                                                   f"got {shown_got}")

        # -- one transaction: when the job update fails, sent_at must not stay
        make_marks_table(MARKS)
        job_id = st.submit_snapshot([53])
        jobs.append(job_id)
        event = unsent(job_id)[0]
        sql(f"INSERT INTO {MARKS} (kind, ref) VALUES ('no-dispatch', %s)", (job_id,))
        body = f"""CREATE TRIGGER lab15_kit_no_dispatch BEFORE UPDATE ON export_jobs FOR EACH ROW
                   BEGIN
                     IF NOT (NEW.last_dispatched_at <=> OLD.last_dispatched_at)
                        AND EXISTS (SELECT 1 FROM {MARKS} WHERE kind='no-dispatch' AND ref=OLD.id) THEN
                       SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lab15 drill: the dispatch time cannot be written';
                     END IF;
                   END"""
        with trigger("lab15_kit_no_dispatch", body, MARKS), parked({event["id"]}):
            try:
                result = pub.publish_one()
            except Exception as exc:  # noqa: BLE001 - a raise is the right answer here
                result = f"{type(exc).__name__}"
        after = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event["id"],))[0]["sent_at"]
        c.note(t(f"last_dispatched_at 写入被触发器拒绝：publish_one() → {result}；sent_at={after}",
                 f"the last_dispatched_at write refused by a trigger: publish_one() → {result}; sent_at={after}"))
        assert after is None, t("任务更新失败，sent_at 却已提交：sent_at 与 last_dispatched_at 必须在同一个事务里",
                                "the job update failed but sent_at was committed: sent_at and last_dispatched_at "
                                "belong in one transaction")

        # -- a stale claim: another publisher has taken the event over
        job_id = st.submit_snapshot([54])
        jobs.append(job_id)
        event = unsent(job_id)[0]
        # Our claim runs out while we send: another publisher claims the event right after the learner's
        # claim_event returned it (done in the probe, between the claim and the send: lab15_learner.py).
        with parked({event["id"]}):
            result = publish_after_takeover(event["id"])
        after = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event["id"],))[0]["sent_at"]
        row = job_row(job_id)
        c.note(t(f"领取被另一 publisher 接手后 publish_one() → {result}；sent_at={after}，last_dispatched_at="
                 f"{row['last_dispatched_at']}",
                 f"claim taken over by another publisher, publish_one() → {result}; sent_at={after}, "
                 f"last_dispatched_at={row['last_dispatched_at']}"))
        assert result is False and after is None and row["last_dispatched_at"] is None, t(
            "过期的领取仍确认了发送并推迟了派发时间：确认的 WHERE 要带 claim_token=%s，rowcount 为 1 才更新 last_dispatched_at",
            "a stale claim still confirmed the send and moved the dispatch time: the confirm's WHERE needs "
            "claim_token=%s, and last_dispatched_at changes only when rowcount == 1")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- 15.7

def check_warm_shutdown(c) -> None:
    st = store()
    app = celery_app()
    declared = DeclaredWorker()
    job_id = st.submit_snapshot([45, 46])
    jobs = [job_id]
    proc = None
    try:
        snapshot = payload_of(job_row(job_id))
        proc = start_worker(own_worker_argv(declared), "worker-warm.log")
        hold("write", job_id)
        task_id = send(app, job_id, queue="lab15.warm")
        paused = wait_hold("write", job_id)
        assert int(paused["pid"]) in children_of(proc.pid), t("暂停的不是检查器自己的 worker", "the paused task is not in "
                                                              "the kit's own worker")
        os.kill(proc.pid, signal.SIGTERM)  # once, to the main process only
        # Bounded, and generous: celery logs its shutdown kind as soon as it handles the signal.
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: "shutdown" in proc.log_text() or not proc.alive(), 30, "the worker's shutdown message")
        warm = "Warm shutdown" in proc.log_text()
        cold = "Cold shutdown" in proc.log_text()
        alive, row = proc.alive(), job_row(job_id)
        c.note(t(f"任务 {short(job_id)} 写文件时向 worker 主进程 {proc.pid} 发送一次 TERM：日志 "
                 f"{'Warm shutdown' if warm else '没有 Warm shutdown'}{'，Cold shutdown' if cold else ''}；"
                 f"worker {'仍在运行' if alive else '已退出'}，任务 {row['status']}",
                 f"one TERM to worker main process {proc.pid} while job {short(job_id)} writes: log "
                 f"{'Warm shutdown' if warm else 'no Warm shutdown'}{', Cold shutdown' if cold else ''}; worker "
                 f"{'still running' if alive else 'exited'}, job {row['status']}"))
        assert warm and alive and not cold, t(
            "一次 TERM 应是 warm shutdown：worker 停止取新消息，但等正在执行的任务完成；不要再发第二个信号或 KILL",
            "one TERM must be a warm shutdown: the worker takes no new messages but waits for the running job; "
            "never follow with a second signal or KILL")
        release("write", job_id)
        with contextlib.suppress(Exception):  # still running after 40 s: reported below
            proc.popen.wait(timeout=40)
        exited = not proc.alive()
        row = job_row(job_id)
        end = task_end(task_id)
        c.note(t(f"放行后：任务 {row['status']}（attempts={row['attempts']}），worker {'已退出，退出码 ' + str(proc.popen.returncode) if exited else '40 秒内未退出'}",
                 f"released: job {row['status']} (attempts={row['attempts']}), worker "
                 f"{'exited with code ' + str(proc.popen.returncode) if exited else 'still up after 40 s'}"))
        assert row["status"] == "succeeded" and end is not None, t(
            f"warm shutdown 期间正在执行的任务没有完成（{row['status']}）", f"the job running during the warm shutdown "
            f"did not finish ({row['status']})")
        path, written = published_payload(row)
        assert same_rows(written, snapshot), t("结果文件不是任务的快照", "the result file is not the job's snapshot")
        assert exited, t("任务完成后 worker 40 秒内没有退出", "the worker did not exit within 40 s after the job finished")
        c.note(t(f"任务先完成（{path.name}），worker 随后退出", f"the job finished first ({path.name}), then the worker exited"))
    finally:
        release("write", job_id)
        if proc is not None:
            proc.stop(grace=5)
        retire(jobs)
