"""Verifier for lesson 15: cancellation, recovery of lost work, dead letters, replay, warm shutdown.

15.1  can_continue is True only for the live owner (a foreign token, a cancel, an expired lease and a
      passed deadline each make it False).  Through the worker: a job cancelled right after its claim
      (the probe pauses the task there) stops at the work boundary — no file, no result; a job cancelled
      while its file is being written is refused by finish; a queued job cancelled before any claim is
      never claimed.  Nothing is ever published as a success; the recovery scan (leases moved into the
      past) makes all three 'cancelled'
15.2  a job is paused mid-write in the worker and its pool child is SIGKILLed (by the PID the probe
      recorded, checked to be a child of the worker).  With the lease still live the scan leaves it
      alone; with the lease moved into the past, the scan makes it queued, error lease_expired,
      attempts unchanged, next_attempt_at = the scan's NOW(6) + 10 s (the server's clock read before and
      after the scan brackets it) and one new unsent event due at that same moment;
      python publisher.py sends nothing for it; with both times moved 11 s back the publisher sends it,
      the worker claims it with attempts == 2 and it succeeds with its snapshot in the file
15.3  a claimed job past its deadline (times moved with UPDATEs) is failed by the scan with a dead
      letter; python replay_job.py <id> prints a new id: queued, attempts 0, replay_of = old, the same
      payload, one unsent event; the old job, its attempts and its dead letter are unchanged.  Replaying
      a job that is not failed changes nothing; with the admission gate full, replay raises
      CapacityExceeded and creates nothing; the replay itself runs to succeeded
15.4  python verify_queued_recovery.py prints "queued delivery recovery verified"; a job whose event was
      sent 61 s ago gets exactly one new event over three scans (attempts 0), one sent 20 s ago none;
      120 overdue jobs: scanner A (a lab15_tools.py process) stops inside its batch right after its first
      locking statement, its transaction open; scanner B must recover other jobs while A still holds its
      locks.  The jobs A holds are counted (a SKIP LOCKED read) and A's scan is EXPLAINed, so a B that got
      nothing is told which index/scan made A lock them all and what to write instead; in the end every
      job has one new event
15.5  python verify_retry_gate.py passes, run with its sleeps fast-forwarded (each sleep moves the job's
      next_attempt_at back by the same amount instead of waiting); then, next_attempt_at an hour ahead,
      three duplicate messages through the worker and two claim() calls get nothing and attempts stays
      0; moved into the past, one message claims it with attempts == 1
15.6  publishing sets sent_at and the job's last_dispatched_at, both inside the publish call; a publisher
      process stops right after the first locking statement that follows its send, and at that moment the
      job row is locked and the outbox row is not (job → outbox, the scan's order); a confirm whose job
      update fails leaves sent_at NULL (one transaction); a publisher whose claim was taken over confirms
      nothing and leaves last_dispatched_at alone
15.7  a worker of the kit's own (same app, a private queue) gets a job paused mid-write; one TERM to
      its main process: "Warm shutdown", the worker stays up, the job finishes (succeeded, file written)
      and only then the worker exits
15.8  exercise: three claims, each lease moved into the past and scanned: twice queued again, the third
      time failed with dead letter attempts_exhausted; no fourth claim (claim() and a message), attempts 3

Time is never waited out: lease_until, deadline_at, next_attempt_at, available_at and sent_at are moved
with UPDATEs.  The kit reads the database through its own connections and never prints credentials.
Each check uses fresh jobs and retires them when done, so any check can run alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path
from uuid import uuid4

import pymysql

from shared import handshake
from shared.celerylab import (LOG_DIR, WORK, DeclaredWorker, children_of, import_learner, pid_running, read_events,
                              redact, short, start_worker)
from shared.i18n import t
from shared.labdb import job_row, kit_db, make_marks_table, sql, trigger, wait_status
from shared.proc import Process, WaitTimeout, run_python, wait_until

EVENTS = LOG_DIR / "lab15-events.jsonl"
HOLD_LIST = LOG_DIR / "lab15-hold.txt"
TERMINAL = ("succeeded", "failed", "cancelled")
UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
QUEUES = ("exports.fast", "exports.bulk")
MARKS = "lab15_kit_marks"


# ---------------------------------------------------------------- the kit's own view of the database

def events_of(job_id: str) -> list[dict]:
    return sql("SELECT id, queue_name, available_at, sent_at, claim_token, claim_until, created_at, NOW(6) AS now "
               "FROM export_outbox WHERE job_id=%s ORDER BY created_at, id", (job_id,))


def unsent(job_id: str) -> list[dict]:
    return [e for e in events_of(job_id) if e["sent_at"] is None]


def dead_letter(job_id: str) -> dict | None:
    rows = sql("SELECT job_id, reason, quarantined_at FROM export_dead_letters WHERE job_id=%s", (job_id,))
    return rows[0] if rows else None


def payload_of(row: dict):
    value = row["payload"]
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def seconds_between(later, earlier) -> float:
    return (later - earlier).total_seconds()


def server_now():
    return sql("SELECT NOW(6) AS now")[0]["now"]


def expire_lease(job_id: str) -> None:
    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s AND status='running'",
        (job_id,))


def make_due(job_id: str) -> None:
    sql("UPDATE export_jobs SET next_attempt_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))


def cancel(job_id: str) -> int:
    """The cancel request exactly as the lesson writes it (schema_recovery.sql); the rows it changed."""
    with kit_db() as cur:
        return cur.execute("UPDATE export_jobs SET cancel_requested=TRUE, updated_at=NOW(6) "
                           "WHERE id=%s AND status IN ('queued','running')", (job_id,))


def files_of(job_id: str) -> list[Path]:
    folder = WORK / "artifacts"
    return sorted(folder.glob(f"*{job_id}*")) if folder.is_dir() else []


def published_payload(row: dict):
    ref = row.get("result_ref")
    assert ref, t("任务 succeeded 但 result_ref 为空", "the job succeeded but result_ref is empty")
    path = Path(ref) if Path(ref).is_absolute() else WORK / ref
    assert path.is_file(), t(f"result_ref 指向的文件不存在：{ref}", f"result_ref points to no file: {ref}")
    return path, json.loads(path.read_text(encoding="utf-8"))


def same_rows(got, expected) -> bool:
    def key(rows):
        return sorted((json.dumps(r, sort_keys=True, default=str) for r in rows))
    try:
        return key(got) == key(expected)
    except TypeError:
        return False


def retire(job_ids: list[str]) -> None:
    """A check's leftovers end here: unsent events marked sent, open jobs closed (never a later check's)."""
    if not job_ids:
        return
    marks = ",".join(["%s"] * len(job_ids))
    with kit_db() as cur:
        cur.execute(f"UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL "
                    f"WHERE job_id IN ({marks}) AND sent_at IS NULL", job_ids)
        cur.execute(f"UPDATE export_jobs SET status='cancelled', error_code='lab_retired', lease_token=NULL, "
                    f"lease_until=NULL WHERE id IN ({marks}) AND status IN ('queued','running')", job_ids)


@contextlib.contextmanager
def parked(keep: set[str]):
    """Other due events are pushed a day ahead for a moment, so a publisher takes exactly ours."""
    others = [r["id"] for r in sql("SELECT id FROM export_outbox WHERE sent_at IS NULL "
                                   "AND available_at<=DATE_ADD(NOW(6), INTERVAL 1 HOUR)") if r["id"] not in keep]
    if others:
        marks = ",".join(["%s"] * len(others))
        sql(f"UPDATE export_outbox SET available_at=DATE_ADD(available_at, INTERVAL 1 DAY) WHERE id IN ({marks})",
            others)
    try:
        yield
    finally:
        if others:
            sql(f"UPDATE export_outbox SET available_at=DATE_SUB(available_at, INTERVAL 1 DAY) WHERE id IN ({marks})",
                others)


# ---------------------------------------------------------------- the learner's modules

_import = import_learner  # a learner module with the functions a check needs


def store(*extra: str):
    return _import("state_store", ("transaction", "submit_snapshot", "claim", "finish", *extra))


def recovery():
    return _import("recovery", ("recover_batch",))


def publisher():
    return _import("publisher", ("claim_event", "publish_one"))


def celery_app():
    module = _import("celery_app", ())
    assert getattr(module, "app", None) is not None, t("celery_app.py 里没有 app", "celery_app.py has no app")
    return module.app


def token_of(job) -> str | None:
    if job is None:
        return None
    assert isinstance(job, dict) and job.get("lease_token"), t(
        f"claim 应返回含 lease_token 的行或 None，实际 {job!r}"[:200],
        f"claim must return a row with lease_token or None, got {job!r}"[:200])
    return str(job["lease_token"])


def scan(rec) -> int:
    count = rec.recover_batch()
    assert isinstance(count, int), t(f"recover_batch() 应返回处理数量，实际 {count!r}",
                                     f"recover_batch() should return how many jobs it changed, got {count!r}")
    return count


def run_script(c, args: list[str], timeout: float = 40, env: dict | None = None):
    done = run_python(args, cwd=WORK, timeout=timeout, env=env)
    output = redact(done.stdout)
    lines = [line[:200] for line in output.splitlines() if line.strip()]
    return done.returncode, output, lines


# ---------------------------------------------------------------- the worker, its deliveries and pauses

def events() -> list[dict]:
    return read_events(EVENTS)


def hold(phase: str, job_id: str) -> None:
    with open(HOLD_LIST, "a", encoding="utf-8") as handle:
        handle.write(f"{phase} {job_id}\n")


def release(phase: str, job_id: str) -> None:
    (LOG_DIR / f"lab15-release-{phase}-{job_id}").touch()


def hold_event(phase: str, job_id: str) -> dict | None:
    return next((e for e in events() if e.get("kind") == "hold" and e.get("phase") == phase
                 and e.get("job") == job_id), None)


def wait_hold(phase: str, job_id: str, seconds: float = 20) -> dict:
    def found():
        return hold_event(phase, job_id)
    try:
        return wait_until(found, seconds, f"the worker to pause job {job_id} at {phase}", interval=0.02)
    except WaitTimeout:
        where = t("领取之后", "after its claim") if phase == "claim" else t(
            "写文件时（文件路径里要有 job_id，如 artifacts/<job_id>.<token>.json）",
            "at the file write (the path must hold the job_id, e.g. artifacts/<job_id>.<token>.json)")
        raise AssertionError(t(f"worker {seconds:g} 秒内没有停在任务 {short(job_id)} 的{where}（看 worker 日志）",
                               f"within {seconds:g}s the worker never paused job {short(job_id)} {where} "
                               "(see the worker log)")) from None


def task_end(task_id: str) -> dict | None:
    return next((e for e in events() if e.get("kind") == "end" and e.get("task_id") == task_id), None)


def wait_end(task_id: str, seconds: float = 20) -> dict:
    try:
        return wait_until(lambda: task_end(task_id), seconds, f"task {task_id} to end", interval=0.05)
    except WaitTimeout:
        raise AssertionError(t(f"worker 在 {seconds:g} 秒内没有执行完消息 {short(task_id)}（看 worker 日志）",
                               f"the worker did not finish message {short(task_id)} within {seconds:g}s "
                               "(see the worker log)")) from None


def shown(end: dict) -> str:
    """A task's return value for a note, without the job id it repeats."""
    value = end.get("retval")
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "job_id"}
    return json.dumps(value, default=str)[:80]


def send(app, job_id: str, queue: str = "exports.fast") -> str:
    """A message for this job, straight to the broker (a duplicate, as far as the job is concerned)."""
    task_id = str(uuid4())
    app.send_task("products.export", args=[job_id], task_id=task_id, queue=queue, ignore_result=True)
    return task_id


def run_published(c, pub, app, job_id: str, event_id: str, seconds: float = 20) -> dict:
    """Publish this event and wait for the job to end.

    The confirm now locks the job row for a few milliseconds; a worker whose claim lands in exactly that
    window sees the row as busy (SKIP LOCKED), claims nothing and acknowledges the message.  The scan
    would re-dispatch the job after 60 s; here one duplicate message stands in for that re-dispatch.
    """
    publish_event(pub, event_id)
    wait_end(event_id, seconds)
    row = job_row(job_id)
    if row["status"] == "queued":
        c.note(t("（这次送达正好碰上 publisher 确认事务锁住任务行，SKIP LOCKED 跳过了它；补发一条重复消息）",
                 "(this delivery met the publisher's confirm holding the job row, so SKIP LOCKED skipped it; one "
                 "duplicate message stands in for the scan's re-dispatch)"))
        wait_end(send(app, job_id, queue="exports.bulk"), seconds)
    return wait_status(job_id, TERMINAL, seconds)


def publish_event(pub, event_id: str, tries: int = 3) -> bool:
    """publish_one() (the learner's, in this process) until our event is sent; the last return value."""
    result = False
    with parked({event_id}):
        for _ in range(tries):
            result = pub.publish_one()
            row = sql("SELECT sent_at FROM export_outbox WHERE id=%s", (event_id,))
            if row and row[0]["sent_at"] is not None:
                return result
    raise AssertionError(t(f"publish_one() 运行 {tries} 次后事件 {short(event_id)} 仍未发送（最后返回 {result!r}）",
                           f"event {short(event_id)} still unsent after {tries} publish_one() calls "
                           f"(last returned {result!r})"))


# ---------------------------------------------------------------- 15.1

def check_cancel(c) -> None:
    st = store("can_continue")
    rec = recovery()
    app = celery_app()
    DeclaredWorker()  # the runner started it; fail early with a clear message if not
    jobs: list[str] = []
    try:
        # -- can_continue answers for the live owner only
        seen = []
        for case in ("live", "foreign token", "cancel requested", "lease expired", "deadline passed"):
            job_id = st.submit_snapshot([3])
            jobs.append(job_id)
            token = token_of(st.claim(job_id))
            assert token, t("新任务 claim 不到 token", "a fresh job could not be claimed")
            asked = token
            if case == "foreign token":
                asked = str(uuid4())
            elif case == "cancel requested":
                cancel(job_id)
            elif case == "lease expired":
                expire_lease(job_id)
            elif case == "deadline passed":
                sql("UPDATE export_jobs SET deadline_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
            answer = st.can_continue(job_id, asked)
            seen.append(f"{case} → {answer}")
            assert answer is (case == "live"), t(
                f"can_continue 在“{case}”时返回 {answer!r}：只有持有当前 token、running、租约与 deadline 都未过期且未取消时"
                "才是 True",
                f"can_continue returned {answer!r} for '{case}': True only for the current token of a running job "
                "inside its lease and deadline with no cancel requested")
        c.note("can_continue: " + "; ".join(seen))

        # -- A: cancelled right after its claim, before the work boundary
        job_a = st.submit_snapshot([4])
        jobs.append(job_a)
        hold("claim", job_a)
        task_a = send(app, job_a)
        wait_hold("claim", job_a)
        changed = cancel(job_a)
        release("claim", job_a)
        end_a = wait_end(task_a)
        row_a = job_row(job_a)
        written = files_of(job_a)
        c.note(t(f"A：worker 领取后（写文件前）取消（UPDATE 改了 {changed} 行）→ 任务返回 "
                 f"{shown(end_a)}；行 {row_a['status']}，文件 {len(written)} 个",
                 f"A: cancelled after the worker's claim, before the write (UPDATE changed {changed} row) → task "
                 f"returned {shown(end_a)}; row {row_a['status']}, "
                 f"{len(written)} file(s)"))
        assert row_a["status"] != "succeeded" and not row_a["result_ref"], t(
            "领取后被取消的任务仍发布了成功", "a job cancelled after its claim still published a success")
        assert not written, t(
            f"取消后 worker 仍写了文件 {written[0].name}：在工作边界（写文件前）调用 can_continue(job_id, token)，"
            "返回 False 就停止",
            f"after the cancel the worker still wrote {written[0].name}: call can_continue(job_id, token) at the work "
            "boundary (before the write) and stop when it is False")

        # -- B: cancelled while the file is being written: finish must refuse
        job_b = st.submit_snapshot([5])
        jobs.append(job_b)
        hold("write", job_b)
        task_b = send(app, job_b)
        wait_hold("write", job_b)
        cancel(job_b)
        release("write", job_b)
        end_b = wait_end(task_b)
        row_b = job_row(job_b)
        c.note(t(f"B：写文件时取消 → 任务返回 {shown(end_b)}；行 {row_b['status']}，"
                 f"result_ref={row_b['result_ref']}",
                 f"B: cancelled during the write → task returned {shown(end_b)}; "
                 f"row {row_b['status']}, result_ref={row_b['result_ref']}"))
        assert row_b["status"] != "succeeded" and not row_b["result_ref"], t(
            "写文件期间被取消的任务仍被 finish 发布为成功：finish 的 WHERE 要带 cancel_requested=FALSE",
            "a job cancelled during its write was still published by finish: keep cancel_requested=FALSE in "
            "finish's WHERE")

        # -- C: cancelled while still queued: nobody claims it
        job_c = st.submit_snapshot([6])
        jobs.append(job_c)
        cancel(job_c)
        wait_end(send(app, job_c))
        row_c = job_row(job_c)
        assert row_c["status"] == "queued" and row_c["attempts"] == 0, t(
            f"排队时已取消的任务被领取了（{row_c['status']}，attempts={row_c['attempts']}）",
            f"a job cancelled while queued was claimed ({row_c['status']}, attempts={row_c['attempts']})")

        # -- the scan closes all three; the running two only once their lease has run out
        expire_lease(job_a)
        expire_lease(job_b)
        scan(rec)
        final = {name: job_row(job) for name, job in (("A", job_a), ("B", job_b), ("C", job_c))}
        c.note(t("租约移到过去后 recover_batch() → " + "，".join(f"{n} {r['status']}/{r['error_code']}" for n, r in final.items()),
                 "leases moved into the past, recover_batch() → " + ", ".join(
                     f"{n} {r['status']}/{r['error_code']}" for n, r in final.items())))
        for name, row in final.items():
            assert row["status"] == "cancelled" and not row["result_ref"], t(
                f"{name} 最终是 {row['status']}（应为 cancelled，且没有 result_ref）：扫描要把 cancel_requested 的任务转为 "
                "cancelled",
                f"{name} ended {row['status']} (expected cancelled with no result_ref): the scan must turn jobs with "
                "cancel_requested into cancelled")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- 15.2

def check_lease_recovery(c) -> None:
    st = store()
    rec = recovery()
    pub = publisher()
    worker = DeclaredWorker()
    ids = [11, 12]
    job_id = st.submit_snapshot(ids)
    jobs = [job_id]
    try:
        snapshot = payload_of(job_row(job_id))
        hold("write", job_id)
        first = unsent(job_id)
        assert len(first) == 1, t("新任务应恰好有 1 条未发送事件", "a new job should have exactly 1 unsent event")
        publish_event(pub, first[0]["id"])
        try:
            wait_until(lambda: hold_event("write", job_id) or task_end(first[0]["id"]), 20,
                       "the worker to start the job", interval=0.02)
        except WaitTimeout:
            pass
        if not hold_event("write", job_id) and task_end(first[0]["id"]):
            c.note(t("（第一次送达碰上 publisher 确认事务锁住任务行，被 SKIP LOCKED 跳过；补发一条消息）",
                     "(the first delivery met the publisher's confirm holding the job row and was skipped; one more "
                     "message sent)"))
            send(celery_app(), job_id)
        paused = wait_hold("write", job_id)
        child = int(paused["pid"])
        assert child in children_of(worker.pid), t(
            f"暂停任务的进程 {child} 不是 worker（pid {worker.pid}）的子进程", f"the paused process {child} is not a "
            f"child of the worker (pid {worker.pid})")
        before = job_row(job_id)
        assert before["status"] == "running" and before["attempts"] == 1, t(
            f"写文件时任务应为 running/1，实际 {before['status']}/{before['attempts']}",
            f"during the write the job should be running/1, got {before['status']}/{before['attempts']}")
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: not pid_running(child), 10, f"pool child {child} to die")
        c.note(t(f"任务 {short(job_id)} 写文件时，worker 子进程 {child} 被 SIGKILL（running，attempts=1）",
                 f"job {short(job_id)} mid-write: worker child {child} SIGKILLed (running, attempts=1)"))
        # acks_late + reject_on_worker_lost may hand the message out again, whenever: its claim finds the job
        # running (live lease), then queued in its backoff, and after that claimable like any other message.
        task_id = first[0]["id"]

        scan(rec)
        live = job_row(job_id)
        c.note(t(f"租约仍有效时 recover_batch() → 行 {live['status']}，token 未变：{live['lease_token'] == before['lease_token']}",
                 f"recover_batch() with the lease still live → row {live['status']}, token unchanged: "
                 f"{live['lease_token'] == before['lease_token']}"))
        assert live["status"] == "running" and live["lease_token"] == before["lease_token"], t(
            "租约还有效的 running 任务被扫描器改动了：只恢复 lease_until 已过的任务",
            "the scan touched a running job whose lease is still live: recover only jobs whose lease_until has passed")

        expire_lease(job_id)
        # The scan's NOW(6) lies between the server's clock read just before and just after it, so
        # next_attempt_at - 10 s must too, however slowly the scan ran.
        before = server_now()
        scan(rec)
        after = server_now()
        row = job_row(job_id)
        pending = unsent(job_id)
        since_start = seconds_between(row["next_attempt_at"], before)
        since_end = seconds_between(row["next_attempt_at"], after)
        c.note(t(f"租约移到过去后 recover_batch() → {row['status']}，error_code={row['error_code']}，attempts={row['attempts']}，"
                 f"next_attempt_at = 扫描开始后 {since_start:.1f} 秒 / 结束后 {since_end:.1f} 秒；未发送事件 {len(pending)} 条",
                 f"lease moved into the past, recover_batch() → {row['status']}, error_code={row['error_code']}, "
                 f"attempts={row['attempts']}, next_attempt_at = {since_start:.1f}s after the scan began / "
                 f"{since_end:.1f}s after it returned; {len(pending)} unsent event(s)"))
        assert row["status"] == "queued" and row["lease_token"] is None, t(
            f"过期租约的任务应回到 queued 并清掉 token，实际 {row['status']}",
            f"a job with an expired lease should be queued again without a token, got {row['status']}")
        assert row["attempts"] == 1, t(f"恢复把 attempts 改成了 {row['attempts']}：恢复从不重置或增加 attempts",
                                       f"recovery changed attempts to {row['attempts']}: recovery never resets or "
                                       "adds attempts")
        assert since_start >= 9 and since_end <= 11, t(
            f"next_attempt_at 应在扫描时刻之后 10 秒，实际为扫描开始后 {since_start:.1f} 秒",
            f"next_attempt_at should be 10 s after the scan, got {since_start:.1f}s after the scan began")
        assert len(pending) == 1, t(f"恢复应新增恰好 1 条未发送事件，实际 {len(pending)} 条",
                                    f"recovery should add exactly 1 unsent event, found {len(pending)}")
        event = pending[0]
        assert event["id"] != task_id and event["available_at"] == row["next_attempt_at"], t(
            "新事件的 available_at 应等于任务的 next_attempt_at（同一退避）",
            "the new event's available_at must equal the job's next_attempt_at (one backoff)")

        with parked({event["id"]}):
            code, output, lines = run_script(c, ["publisher.py"])
        after = sql("SELECT sent_at, claim_token FROM export_outbox WHERE id=%s", (event["id"],))[0]
        c.note(t(f"退避中 python publisher.py → {lines[-1] if lines else ''}（退出码 {code}）；事件仍未发送：{after['sent_at'] is None}",
                 f"during the backoff python publisher.py → {lines[-1] if lines else ''} (exit code {code}); "
                 f"the event is still unsent: {after['sent_at'] is None}"))
        assert after["sent_at"] is None and after["claim_token"] is None, t(
            "退避未到，publisher 却领取或发送了恢复事件：claim_event 要求 available_at<=NOW(6)",
            "the publisher claimed or sent the recovery event before its available_at")

        sql("UPDATE export_jobs SET next_attempt_at=DATE_SUB(next_attempt_at, INTERVAL 11 SECOND) WHERE id=%s", (job_id,))
        sql("UPDATE export_outbox SET available_at=DATE_SUB(available_at, INTERVAL 11 SECOND) WHERE id=%s", (event["id"],))
        row = run_published(c, pub, celery_app(), job_id, event["id"])
        c.note(t(f"退避时间移到过去（各 -11 秒）后发布 → 任务 {row['status']}，attempts={row['attempts']}",
                 f"backoff moved 11 s into the past, then published → job {row['status']}, attempts={row['attempts']}"))
        assert row["status"] == "succeeded", t(f"恢复后的任务结束于 {row['status']}", f"the recovered job ended {row['status']}")
        assert row["attempts"] == 2, t(f"恢复后的领取应是 attempts == 2，实际 {row['attempts']}",
                                       f"the claim after recovery should have attempts == 2, got {row['attempts']}")
        path, written = published_payload(row)
        assert same_rows(written, snapshot), t("结果文件不是任务的快照", "the result file is not the job's snapshot")
        claimed_by = [e for e in events() if e.get("kind") == "start" and e.get("args", [None])[:1] == [job_id]
                      and e.get("task_id") == event["id"]]
        c.note(t(f"恢复事件 {short(event['id'])} 送达 {len(claimed_by)} 次；结果文件 {path.name} 内容是提交时的快照",
                 f"recovery event {short(event['id'])} delivered {len(claimed_by)} time(s); result file {path.name} "
                 "holds the submit-time snapshot"))
    finally:
        release("write", job_id)
        retire(jobs)


# ---------------------------------------------------------------- 15.3

def check_dead_letter_replay(c) -> None:
    st = store("decode_payload")
    rec = recovery()
    pub = publisher()
    replay_mod = _import("replay_job", ("replay",))
    job_id = st.submit_snapshot([21, 22])
    jobs = [job_id]
    fillers: list[str] = []
    try:
        assert token_of(st.claim(job_id)), t("新任务 claim 不到 token", "a fresh job could not be claimed")
        sql("UPDATE export_jobs SET deadline_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND), "
            "lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
        scan(rec)
        old = job_row(job_id)
        letter = dead_letter(job_id)
        c.note(t(f"已领取的任务 {short(job_id)} 超过 deadline、租约过期 → recover_batch() → {old['status']}/"
                 f"{old['error_code']}，死信 {letter and letter['reason']}",
                 f"claimed job {short(job_id)} past its deadline, lease expired → recover_batch() → {old['status']}/"
                 f"{old['error_code']}, dead letter {letter and letter['reason']}"))
        assert old["status"] == "failed", t(f"超过 deadline 的任务应 failed，实际 {old['status']}",
                                            f"a job past its deadline should be failed, got {old['status']}")
        assert letter is not None, t("failed 任务没有 export_dead_letters 记录", "the failed job has no export_dead_letters row")

        code, output, lines = run_script(c, ["replay_job.py", job_id])
        found = re.findall(UUID_RE, lines[-1]) if lines else []
        c.note(f"python replay_job.py {short(job_id)} → " + (lines[-1] if lines else t("（无输出）", "(no output)")))
        assert code == 0 and found and found[-1] != job_id, t(
            "replay_job.py 应打印新任务的 id（见上方输出）", "replay_job.py should print the new job's id (see above)")
        new_id = found[-1]
        jobs.append(new_id)
        new = job_row(new_id)
        assert new is not None, t("replay_job.py 打印的 id 在 export_jobs 里不存在", "the printed id is not in export_jobs")
        new_events = unsent(new_id)
        c.note(t(f"新任务 {short(new_id)}：{new['status']}，attempts={new['attempts']}，replay_of={short(new['replay_of'])}，"
                 f"未发送事件 {len(new_events)} 条",
                 f"new job {short(new_id)}: {new['status']}, attempts={new['attempts']}, replay_of="
                 f"{short(new['replay_of'])}, {len(new_events)} unsent event(s)"))
        assert new["status"] == "queued" and new["attempts"] == 0, t(
            f"重放任务应为 queued/0，实际 {new['status']}/{new['attempts']}",
            f"the replay should be queued/0, got {new['status']}/{new['attempts']}")
        assert new["replay_of"] == job_id, t("新任务的 replay_of 没有指向原任务", "the new job's replay_of does not "
                                             "point at the failed job")
        assert payload_of(new) == payload_of(old), t("重放任务的 payload 不是原任务的快照",
                                                     "the replay's payload is not the failed job's snapshot")
        assert seconds_between(new["deadline_at"], new["now"]) > 60, t(
            "重放任务应有新的 deadline（原任务的已过）", "the replay needs a fresh deadline (the old one has passed)")
        assert len(new_events) == 1, t(f"重放应建立恰好 1 条未发送事件，实际 {len(new_events)} 条",
                                       f"the replay should create exactly 1 unsent event, found {len(new_events)}")
        kept, letter_after = job_row(job_id), dead_letter(job_id)
        assert (kept["status"], kept["attempts"], kept["error_code"]) == (old["status"], old["attempts"], old["error_code"]), t(
            f"重放改动了原任务（现在 {kept['status']}，attempts={kept['attempts']}）：原任务与它的证据必须保持不变",
            f"the replay changed the failed job (now {kept['status']}, attempts={kept['attempts']}): the old job and "
            "its evidence must stay as they were")
        assert letter_after == letter, t("重放删除或改写了死信记录", "the replay removed or rewrote the dead letter")
        c.note(t(f"原任务仍 failed，attempts={kept['attempts']}，死信 {letter['reason']} 原样保留",
                 f"the old job is still failed, attempts={kept['attempts']}, dead letter {letter['reason']} intact"))

        queued = st.submit_snapshot([23])
        jobs.append(queued)
        before = sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]
        code, output, lines = run_script(c, ["replay_job.py", queued])
        after = sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]
        c.note(t(f"对 queued 任务运行 replay_job.py → 退出码 {code}，任务数 {before} → {after}",
                 f"replay_job.py on a queued job → exit code {code}, jobs {before} → {after}"))
        assert code != 0 and after == before, t("只有 failed 任务可以重放：对 queued 任务应报错且不建新任务",
                                                "only failed jobs can be replayed: a queued job must be refused "
                                                "with nothing created")

        limit = getattr(st, "ADMISSION_LIMIT", 100)
        limit = limit if type(limit) is int and 0 < limit <= 1000 else 100
        open_now = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')")[0]["n"]
        fillers = [str(uuid4()) for _ in range(max(0, limit - open_now))]
        with kit_db() as cur:
            cur.executemany("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                            "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(f,) for f in fillers])
        before = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE replay_of=%s", (job_id,))[0]["n"]
        refused = None
        try:
            jobs.append(replay_mod.replay(job_id))
        except Exception as exc:  # noqa: BLE001 - the gate's own exception is what we expect
            refused = exc
        after = sql("SELECT COUNT(*) AS n FROM export_jobs WHERE replay_of=%s", (job_id,))[0]["n"]
        c.note(t(f"准入门闩已满（{limit}）时 replay() → {type(refused).__name__ if refused else '成功'}",
                 f"with the admission gate full ({limit}) replay() → {type(refused).__name__ if refused else 'succeeded'}"))
        assert refused is not None and type(refused).__name__ == "CapacityExceeded" and after == before, t(
            "容量已满时重放仍建立了任务：replay 要先在同一事务里调用 admit_export(cur)",
            "the replay created a job although capacity was full: call admit_export(cur) first in the same "
            "transaction")
        remove_jobs(fillers)
        fillers = []

        done = run_published(c, pub, celery_app(), new_id, new_events[0]["id"])
        assert done["status"] == "succeeded", t(f"重放任务结束于 {done['status']}", f"the replay ended {done['status']}")
        path, written = published_payload(done)
        assert same_rows(written, payload_of(old)), t("重放的结果文件不是原快照", "the replay's file is not the old snapshot")
        c.note(t(f"重放任务发布后 succeeded，文件 {path.name} 是原快照", f"the replay, published, succeeded; file "
                 f"{path.name} holds the old snapshot"))
    finally:
        if fillers:
            remove_jobs(fillers)
        retire(jobs)


# ---------------------------------------------------------------- 15.4

def overdue(job_id: str, seconds_ago: int) -> None:
    """This job's event was sent (and confirmed) `seconds_ago`, and nobody ever claimed the job."""
    with kit_db() as cur:
        cur.execute("UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), claim_until=NULL "
                    "WHERE job_id=%s AND sent_at IS NULL", (seconds_ago, job_id))
        cur.execute("UPDATE export_jobs SET last_dispatched_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), "
                    "updated_at=DATE_SUB(NOW(6), INTERVAL %s SECOND), next_attempt_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) "
                    "WHERE id=%s", (seconds_ago, seconds_ago, seconds_ago, job_id))


def time_passes(job_id: str, seconds: int) -> None:
    """As if `seconds` went by with nobody touching this job: all its recorded times move back."""
    with kit_db() as cur:
        cur.execute("UPDATE export_jobs SET updated_at=DATE_SUB(updated_at, INTERVAL %s SECOND), "
                    "next_attempt_at=DATE_SUB(next_attempt_at, INTERVAL %s SECOND), "
                    "last_dispatched_at=DATE_SUB(last_dispatched_at, INTERVAL %s SECOND), "
                    "created_at=DATE_SUB(created_at, INTERVAL %s SECOND) WHERE id=%s", (seconds,) * 4 + (job_id,))
        cur.execute("UPDATE export_outbox SET created_at=DATE_SUB(created_at, INTERVAL %s SECOND), "
                    "available_at=DATE_SUB(available_at, INTERVAL %s SECOND), "
                    "sent_at=DATE_SUB(sent_at, INTERVAL %s SECOND) WHERE job_id=%s", (seconds,) * 3 + (job_id,))


def add_overdue(n: int) -> list[str]:
    """n queued jobs, each dispatched 2 minutes ago and never claimed, in a known updated_at order."""
    jobs = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        cur.executemany(
            "INSERT INTO export_jobs (id, payload, deadline_at, created_at, updated_at, next_attempt_at, "
            "last_dispatched_at) VALUES (%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE), "
            "DATE_SUB(NOW(6), INTERVAL 3 MINUTE), DATE_ADD(DATE_SUB(NOW(6), INTERVAL 2 MINUTE), INTERVAL %s MICROSECOND), "
            "DATE_SUB(NOW(6), INTERVAL 2 MINUTE), DATE_SUB(NOW(6), INTERVAL 2 MINUTE))",
            [(j, k) for k, j in enumerate(jobs)])
        cur.executemany("INSERT INTO export_outbox (id, job_id, sent_at) VALUES "
                        "(%s, %s, DATE_SUB(NOW(6), INTERVAL 2 MINUTE))", [(str(uuid4()), j) for j in jobs])
    return jobs


def remove_jobs(jobs: list[str]) -> None:
    with kit_db() as cur:
        for start in range(0, len(jobs), 500):
            part = jobs[start:start + 500]
            marks = ",".join(["%s"] * len(part))
            cur.execute(f"DELETE FROM export_outbox WHERE job_id IN ({marks})", part)
            cur.execute(f"DELETE FROM export_dead_letters WHERE job_id IN ({marks})", part)
            cur.execute(f"DELETE FROM export_jobs WHERE id IN ({marks})", part)


class Helpers:
    """lab15_tools.py processes (scan or publish), each running the learner's code when the checker says go."""

    def __init__(self, command: str, names: list[str]):
        self.folder = LOG_DIR / f"lab15-{command}-{uuid4().hex[:8]}"
        self.folder.mkdir(parents=True)
        self.procs = {name: Process([sys.executable, "lab15_tools.py", command, str(self.folder), name], cwd=WORK,
                                    log_path=self.folder / f"{name}.log") for name in names}
        try:
            wait_until(lambda: all((self.folder / f"ready-{n}").exists() for n in names) or self.dead(), 30,
                       f"the {command} processes to import the learner's modules", interval=0.02)
            dead = self.dead()
            assert not dead, t(f"辅助进程 {dead[0]} 启动失败：\n", f"helper process {dead[0]} failed to start:\n") + \
                redact(self.procs[dead[0]].log_tail(6))
        except BaseException:
            self.stop()
            raise

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if not p.alive() and not self.finished(n)]

    def go(self, name: str, plan: dict) -> None:
        handshake.go(self.folder, [name], plan)

    def release(self, name: str) -> None:
        """Let a held helper go on (its round 2)."""
        handshake.go(self.folder, [name], round_no=2)

    def held(self, name: str) -> dict | None:
        path = self.folder / f"held-{name}"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def wait_held(self, name: str) -> dict | None:
        """The statement the helper stopped after; None if it finished without taking a lock."""
        wait_until(lambda: self.held(name) or self.finished(name) or self.dead(), 30,
                   f"helper {name} to take its first lock", interval=0.01)
        return self.held(name)

    def finished(self, name: str) -> bool:
        return (self.folder / f"res-{name}-1").exists()

    def result(self, name: str, seconds: float) -> dict | None:
        """{"value"} or {"error"}; None if the helper has not finished within `seconds`."""
        try:
            wait_until(lambda: self.finished(name) or not self.procs[name].alive(), seconds, f"helper {name}",
                       interval=0.005)
        except WaitTimeout:
            return None
        assert self.finished(name), t(f"辅助进程 {name} 没有给出结果就退出了：\n",
                                      f"helper process {name} ended without a result:\n") + \
            redact(self.procs[name].log_tail(6))
        return json.loads((self.folder / f"res-{name}-1").read_text(encoding="utf-8"))

    def stop(self) -> None:
        handshake.stop(self.folder)
        for proc in self.procs.values():
            proc.stop(grace=3)


def held_by_others(table: str, ids: list[str]) -> int:
    """How many of these rows another transaction holds locked now: a SKIP LOCKED read by primary key
    takes all the others (and lets them go at once), exactly as a second scanner would find them."""
    free = 0
    with kit_db(autocommit=False) as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            free += cur.execute(f"SELECT id FROM {table} WHERE id IN ({','.join(['%s'] * len(part))}) "
                                "FOR UPDATE SKIP LOCKED", part)
        cur.connection.rollback()
    return len(ids) - free


def row_lock_error(table: str, row_id: str) -> str | None:
    """None if the kit can lock this row at once; otherwise the server's error."""
    try:
        with kit_db(autocommit=False) as cur:
            cur.execute(f"SELECT id FROM {table} WHERE id=%s FOR UPDATE NOWAIT", (row_id,))
            cur.connection.rollback()
        return None
    except pymysql.MySQLError as exc:
        return f"{exc.args[0]}"


def index_columns(table: str) -> dict[str, list[str]]:
    rows = sql("SELECT INDEX_NAME AS name, COLUMN_NAME AS col FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA=DATABASE() AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX", (table,))
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["name"], []).append(row["col"])
    return found


def plan_of(statement: str, table: str, alias: str) -> dict:
    """EXPLAIN of a SELECT the learner's code sent (EXPLAIN runs nothing): the row for the table, the index."""
    row: dict = {}
    if re.match(r"\s*SELECT\b", statement, re.I):
        with contextlib.suppress(pymysql.MySQLError), kit_db() as cur:
            cur.execute("EXPLAIN " + statement)  # no arguments: the statement is already complete
            rows = list(cur.fetchall())
            row = next((r for r in rows if r.get("table") in (table, alias)), rows[0] if rows else {})
    key = row.get("key")
    columns = index_columns(table).get(key, []) if key else []
    return {"key": key, "index": f"{key} ({', '.join(columns)})" if key else None,
            "filesort": "filesort" in (row.get("Extra") or ""),
            "line": (f"table={row.get('table')} type={row.get('type')} key={key or 'NULL'} rows={row.get('rows')} "
                     f"Extra: {row.get('Extra') or ''}") if row else t("（EXPLAIN 没有结果）", "(EXPLAIN gave nothing)")}


def one_line(statement: str, limit: int = 150) -> str:
    text = " ".join(statement.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def lock_waits() -> list[str]:
    """Sessions of this schema waiting for a row lock (one read; innodb_trx is a cache, never polled)."""
    rows = sql("SELECT t.trx_mysql_thread_id AS thread, LEFT(t.trx_query, 120) AS query "
               "FROM information_schema.innodb_trx AS t JOIN information_schema.PROCESSLIST AS p "
               "ON p.ID=t.trx_mysql_thread_id WHERE t.trx_state='LOCK WAIT' AND p.DB=DATABASE()")
    return [f"thread {r['thread']}: {one_line(r['query'] or '', 80)}" for r in rows]


SCAN_INDEX = "KEY export_jobs_recovery_scan (status, updated_at, id)"


def all_locked_message(statement: str, plan: dict, locked: int, overdue: int) -> str:
    """Why scanner B recovered nothing, in one read: the rows A locked, the plan that did it, the fix."""
    seen = t(f"扫描器 B 一个任务也没恢复：扫描器 A 停在自己的批次事务里（LIMIT 50）时，锁住了 {overdue} 个逾期任务中的 "
             f"{locked} 个。", f"scanner B recovered nothing: while scanner A sat inside its batch transaction "
             f"(LIMIT 50) it held {locked} of the {overdue} overdue jobs locked. ")
    if not plan["filesort"]:
        return seen + t(f"A 的扫描 SELECT 的 EXPLAIN：{plan['line']}。一批只能锁住它返回的行：建索引 (status, updated_at, id)，"
                        "扫描用 FORCE INDEX 选它并 ORDER BY j.status, j.updated_at, j.id（见本课指南）",
                        f"EXPLAIN of A's scan SELECT: {plan['line']}. A batch must lock only the rows it returns: add "
                        "the index (status, updated_at, id), pick it with FORCE INDEX and ORDER BY j.status, "
                        "j.updated_at, j.id (see this lesson's guide)")
    flat = " ".join(statement.split())
    forced = re.search(r"FORCE\s+INDEX", flat, re.I) is not None
    ordered = re.search(r"ORDER\s+BY\s+j\.status\s*,\s*j\.updated_at\s*,\s*j\.id\b", flat, re.I) is not None
    course = not forced and re.search(r"ORDER\s+BY\s+j\.updated_at\s*,\s*j\.id\b", flat, re.I) is not None
    has_index = ["status", "updated_at", "id"] in index_columns("export_jobs").values()
    how = (t(f"它经由索引 {plan['index']} 读取", f"It reads through {plan['index']}") if plan["key"]
           else t("它读整张表", "It reads the whole table"))
    steps_zh, steps_en = [], []
    if not has_index:
        steps_zh.append(f"schema_recovery.sql 的 ALTER TABLE export_jobs 里加一行 ADD {SCAN_INDEX}（已建好的表执行 "
                        f"ALTER TABLE export_jobs ADD {SCAN_INDEX};）")
        steps_en.append(f"in schema_recovery.sql's ALTER TABLE export_jobs add the line ADD {SCAN_INDEX} (on the table "
                        f"you already have: ALTER TABLE export_jobs ADD {SCAN_INDEX};)")
    if not forced:
        steps_zh.append("recovery.py 里写 FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)")
        steps_en.append("in recovery.py write FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)")
    if not ordered:
        steps_zh.append("排序改成 ORDER BY j.status, j.updated_at, j.id")
        steps_en.append("write ORDER BY j.status, j.updated_at, j.id")
    return seen + t(
        ("原因在课程原文的扫描，不是你打错了。" if course else "原因在扫描用的索引。")
        + f"A 的 SELECT … FOR UPDATE SKIP LOCKED 的 EXPLAIN：{plan['line']}。{how}。Using filesort：WHERE 允许两个 "
        "status，没有索引能直接按排序给出候选行，服务器先读出并排序全部候选行，再取 LIMIT 50——FOR UPDATE 锁住了它读过的"
        "每一行。修改（索引、FORCE INDEX 与 ORDER BY 缺一不可）：" + "；".join(f"（{k}）{step}" for k, step in enumerate(steps_zh, 1))
        + "（见本课指南“让 SKIP LOCKED 真的跳过”）",
        ("The cause is the course's scan, not your typing. " if course else "The cause is the scan's index. ")
        + f"EXPLAIN of A's SELECT … FOR UPDATE SKIP LOCKED: {plan['line']}. {how}. Using filesort: the WHERE allows "
        "two statuses and no index hands out the candidates in the ORDER BY, so the server reads and sorts every "
        "candidate before LIMIT 50, and FOR UPDATE locks every row it read. Fix (the index, FORCE INDEX and the "
        "ORDER BY work only together): "
        + "; ".join(f"({k}) {step}" for k, step in enumerate(steps_en, 1))
        + " (this lesson's guide: 'Making SKIP LOCKED really skip')")


def pending_counts(jobs: list[str]) -> dict[str, int]:
    counts = {j: 0 for j in jobs}
    for start in range(0, len(jobs), 500):
        part = jobs[start:start + 500]
        marks = ",".join(["%s"] * len(part))
        for row in sql(f"SELECT job_id, COUNT(*) AS n FROM export_outbox WHERE job_id IN ({marks}) "
                       f"AND sent_at IS NULL GROUP BY job_id", part):
            counts[row["job_id"]] = row["n"]
    return counts


def check_unclaimed(c) -> None:
    st = store()
    rec = recovery()
    jobs: list[str] = []
    crowd: list[str] = []
    try:
        code, output, lines = run_script(c, ["verify_queued_recovery.py"])
        found = re.findall(rf"queued delivery recovery verified\s+({UUID_RE})", output)
        c.note(f"python verify_queued_recovery.py → " + (lines[-1] if lines else t("（无输出）", "(no output)")))
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

        job_id = st.submit_snapshot([41])
        jobs.append(job_id)
        # An hour, not the script's 10 s: the backoff must still hold however slowly the messages are handled.
        sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 1 HOUR) WHERE id=%s", (job_id,))
        ends = [wait_end(task) for task in [send(app, job_id) for _ in range(3)]]
        direct = [st.claim(job_id) for _ in range(2)]
        row = job_row(job_id)
        c.note(t(f"next_attempt_at 在一小时后：3 条重复消息经 worker → "
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
        real_claim = pub.claim_event

        def claim_then_lose():
            claimed = real_claim()
            if claimed is not None and str(claimed.get("id")) == event["id"]:
                # Our claim ran out while we sent; another publisher claimed the event after us.
                sql("UPDATE export_outbox SET claim_token=%s, claim_until=DATE_ADD(NOW(6), INTERVAL 30 SECOND) "
                    "WHERE id=%s", (str(uuid4()), event["id"]))
            return claimed

        pub.claim_event = claim_then_lose
        try:
            with parked({event["id"]}):
                result = pub.publish_one()
        finally:
            pub.claim_event = real_claim
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

def own_worker_argv(declared: DeclaredWorker) -> list[str]:
    """The declared worker's command (same app, probe and options) on a private queue, one process."""
    out, skip = [], False
    for part in declared.argv:
        if skip:
            skip = False
        elif part in ("-Q", "--queues", "-n", "--hostname", "-c", "--concurrency"):
            skip = True
        elif not part.startswith(("--queues=", "--hostname=", "--concurrency=")):
            out.append(part)
    return [*out, "-Q", "lab15.warm", "--concurrency=1", "-n", "lab15warm@%h"]


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


# ---------------------------------------------------------------- 15.8

def check_exhausted(c) -> None:
    st = store()
    rec = recovery()
    app = celery_app()
    DeclaredWorker()
    job_id = st.submit_snapshot([47])
    jobs = [job_id]
    try:
        trail = []
        for attempt in (1, 2, 3):
            make_due(job_id)
            job = st.claim(job_id)
            assert token_of(job), t(f"第 {attempt} 次 claim 拿不到 token（应可领取）",
                                    f"claim {attempt} got no token (the job should be claimable)")
            assert job["attempts"] == attempt, t(f"第 {attempt} 次领取 attempts 应为 {attempt}，实际 {job['attempts']}",
                                                 f"claim {attempt} should have attempts {attempt}, got {job['attempts']}")
            expire_lease(job_id)
            scan(rec)
            row = job_row(job_id)
            trail.append(f"{attempt}: {row['status']}/{row['error_code']}")
            if attempt < 3:
                assert row["status"] == "queued", t(f"第 {attempt} 次租约过期后应回到 queued，实际 {row['status']}",
                                                    f"after expired claim {attempt} the job should be queued again, "
                                                    f"got {row['status']}")
        c.note(t("三次领取、每次租约过期后扫描 → " + "；".join(trail), "three claims, each lease expired and scanned → "
                 + "; ".join(trail)))
        row, letter = job_row(job_id), dead_letter(job_id)
        assert row["status"] == "failed" and row["attempts"] == 3, t(
            f"第三次过期后应 failed 且 attempts=3，实际 {row['status']}/{row['attempts']}：扫描要把 attempts>=3 的任务转为 "
            "failed 并写死信",
            f"after the third expiry the job should be failed with attempts 3, got {row['status']}/{row['attempts']}: "
            "the scan must move jobs with attempts>=3 to failed with a dead letter")
        assert letter is not None, t("failed 任务没有死信记录", "the failed job has no dead letter")
        make_due(job_id)
        fourth = st.claim(job_id)
        end = wait_end(send(app, job_id))
        scan(rec)
        row = job_row(job_id)
        letters = sql("SELECT COUNT(*) AS n FROM export_dead_letters WHERE job_id=%s", (job_id,))[0]["n"]
        c.note(t(f"死信 {letter['reason']}；第 4 次 claim() → {token_of(fourth)}，一条消息 → "
                 f"{shown(end)}；之后 {row['status']}，attempts={row['attempts']}，"
                 f"死信 {letters} 条",
                 f"dead letter {letter['reason']}; a 4th claim() → {token_of(fourth)}, a message → "
                 f"{shown(end)}; afterwards {row['status']}, "
                 f"attempts={row['attempts']}, {letters} dead letter(s)"))
        assert fourth is None and row["status"] == "failed" and row["attempts"] == 3 and letters == 1, t(
            "耗尽后仍有第 4 次领取或状态被改动", "a 4th claim happened after exhaustion, or the failed job changed")
    finally:
        retire(jobs)


# ---------------------------------------------------------------- main

@contextlib.contextmanager
def explained():
    """Turn the one known server mismatch into a pointer to lesson 11's guide instead of a bare traceback."""
    try:
        yield
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1193 and "max_execution_time" in str(exc):
            raise AssertionError(t("服务器是 MariaDB，不认识 max_execution_time：按第 11 课指南把 connect() 里那一行改成 "
                                   "SET SESSION max_statement_time = 3",
                                   "the server is MariaDB, which has no max_execution_time: change that line in "
                                   "connect() to SET SESSION max_statement_time = 3 (lesson 11's guide)")) from None
        raise


def main(tap) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    checks = [("15.1", check_cancel), ("15.2", check_lease_recovery), ("15.3", check_dead_letter_replay),
              ("15.4", check_unclaimed), ("15.5", check_retry_gate), ("15.6", check_confirm),
              ("15.7", check_warm_shutdown), ("15.8", check_exhausted)]
    for check_id, body in checks:
        with tap.check(check_id) as c, explained():
            c.skip_unless_selected()
            body(c)


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
