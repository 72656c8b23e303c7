"""Lesson 16's failure-matrix catalogue (kit module, not a lesson file): the 15 rows of failure-matrix.md
(Case: the row's id, fault point, operation, expected result and the drill that runs it) and the runner of
one row: baseline → inject → recover, into a record row (lab16_record's rules).

The drills are lab16_drills_execution (rows 1-8: a job's way from submit to result) and
lab16_drills_dispatch (rows 9-15: what enters the queue and what is sent again).  A row's verdict rests on
what its drill read; a row that raised or whose claim did not hold is fail, with why.
"""

from __future__ import annotations

import contextlib
import time
import traceback

from lab16_drills_dispatch import (case_backoff_duplicates, case_cross_minute, case_fail_before_claim,
                                   case_pending_rescan, case_queue_full, case_same_slot, case_sent_unclaimed)
from lab16_drills_execution import (case_broker_down, case_cancel, case_commit_fault, case_exhausted,
                                    case_publish_before_mark, case_result_cache, case_stale_token, case_worker_exit)
from lab16_fixture import (FAIL_LIST, HOLD_LIST, active_jobs, artifact_evidence, deliveries, drop_kit_triggers,
                           due_events, park, release)
from lab16_record import empty_row, now_iso
from lab16_row import Row

from shared.celerylab import redact
from shared.i18n import t
from shared.labdb import job_row, sql


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
    assert lab.worker is not None and lab.worker.alive(), t("the matrix worker has exited; see lab16-worker.log")
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
        assert len(row.faults) == 1, t("this row injected no fault")
        assert row.recovery_seconds is not None, t("this row recorded no recovery")
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
