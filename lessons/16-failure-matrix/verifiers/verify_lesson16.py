"""Verifier for lesson 16: phase logs, monitor queries, terminal verification and the failure matrix.

16.1  the learner's verification-record.json is evidence: every row says pass, fail or not_run with the
      form's rules (a pass row: a UUID job_id, an operation time, real statuses in observed_states, a
      measured recovery_seconds, a counted duplicate_deliveries); at least one row is pass; each pass
      row is re-earned here — run again on the learner's code, the row this run writes is backed by
      the database and the deliveries, and the learner's row says what it shows (lab16_evidence).
      The course's template, nothing run, fails with every row and why it is not backed.
16.2  python verify_terminal.py <job_id>: a job run by the worker → "artifact verified"; a succeeded row
      whose file holds the payload with other key order and spacing → verified; a file whose values
      differ, a result_ref escaping artifacts/ (artifacts/../x.json) and a cancelled job with a
      result_ref → exit 1 and no "artifact verified"; a failed job without result_ref →
      "terminal without published artifact"
16.3  matrix rows result_cache_expired, queue_full, same_slot_concurrent pass
16.4  matrix rows sent_not_claimed, duplicate_during_backoff, cross_minute_redelivery pass
16.5  with the learner's claim and recover_batch (no worker): a re-dispatch (sent, lost, overdue)
      leaves attempts 0 and only the claim makes it 1; an expired lease is requeued with
      next_attempt_at in the future and its new event available at that same moment, nothing claims
      before it; a queued job and an expired running job past deadline_at go to failed with a dead
      letter and no new event
16.6  a job through the worker: JSON phase lines with job_id, phase, message_id (= the delivered task
      id), lease_token (= the row's token) and attempt; the whole worker log holds no product
      description, no password, no URL with credentials
16.7  monitor_exports.sql in a scratch schema: every statement runs; empty, the ages are NULL (not 0);
      with known rows, counts and ages (42 s, 75 s) come out right
16.8  all 15 matrix rows: pass, fresh job each, one fault each, evidence consistent with the database
16.9  measured recovery: worker_exit_with_lease ≤ 60 s, sent_not_claimed and fail_before_claim ≤ 90 s
16.10 exercise: publish-before-mark while the first delivery is slow: the worker's phase lines tie two
      deliveries of the same message id to the job with two different lease tokens; the old token's
      line reports no success, and the one result_ref is the new token's file

The matrix's lab (private broker, workers) starts once, before the first check, when a selected check
needs it; each matrix row runs at most once per verifier run, when the first check that needs it asks
(16.1 the rows the learner's record marks pass, 16.3 and 16.4 their own rows, 16.8 the rest); its record
is $LAB_LOG_DIR/verification-record.json.
Times that can be set are moved, never waited out; waits poll facts (rows, the probe's events, files a
helper writes) within generous bounds.  Credentials are never printed.

This file holds the table and one function per check; their helpers are judge-side modules beside it:
lab16_shared_lab (the lab and the matrix the checks share, a check's rows shown), lab16_evidence (16.1),
lab16_terminal (16.2), lab16_worker_log (16.6, 16.10), lab16_monitor (16.7), and the matrix's own parts
(failure_matrix and the modules it names).  None of them imports learner code: that runs in the probe
(lab16_learner.py), in the worker (lab16_probe.py) and in the learner's own scripts.
"""

from __future__ import annotations

import contextlib
import json
from uuid import UUID

from lab16_cases import CASE_IDS
from lab16_evidence import (backing_problems, claim_problems, collapse, learner_record, real_statuses,
                            why_not_backed)
from lab16_fixture import (advance, artifact_evidence, claim_seconds_left, confirm_lost, dead_letters, deliveries,
                           ended, events_of, hold, holds, learner, park, payload_of, pending_of, release,
                           seconds_until)
from lab16_monitor import (age_bounds, insert_known_rows, load_schemas, number, pick, run_monitor, scratch_schema,
                           server_now, waiting_since)
from lab16_publishing import publishing
from lab16_record import RECORD, row_problems
from lab16_row import Row, scan_until, settle, unclaimed_reason
from lab16_shared_lab import Shared, describe, require_pass, run_rows
from lab16_terminal import run_terminal, terminal_cases
from lab16_worker_log import log_leaks, phase_lines, worker_logs

from shared.celerylab import WORK, short
from shared.i18n import t
from shared.labdb import job_row, sql
from shared.proc import wait_until
from shared.tap import Check, run

ROWS_FOR = {
    "16.3": ["result_cache_expired", "queue_full", "same_slot_concurrent"],
    "16.4": ["sent_not_claimed", "duplicate_during_backoff", "cross_minute_redelivery"],
    "16.8": CASE_IDS,
    "16.9": ["worker_exit_with_lease", "sent_not_claimed", "fail_before_claim"],
}
NEEDS_LAB = {"16.2", "16.3", "16.4", "16.6", "16.8", "16.9", "16.10"}  # and 16.1 when the record claims a row


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the box's MariaDB; the ones marked `lab` the matrix's
    lab (private broker, workers: Shared, started in main before the first check when a selected check needs it)."""
    return [
        Check("16.1", check_record, "verification-record.json; lab for the rows it marks pass"),
        Check("16.2", check_terminal, "lab; python verify_terminal.py"),
        Check("16.3", lambda c: check_rows(c, ROWS_FOR["16.3"]), "lab: its three matrix rows"),
        Check("16.4", lambda c: check_rows(c, ROWS_FOR["16.4"]), "lab: its three matrix rows"),
        Check("16.5", check_durable_waits, "the learner's claim and recover_batch, no worker"),
        Check("16.6", check_phase_logs, "lab: a job through the worker, its log"),
        Check("16.7", check_monitor, "monitor_exports.sql in a scratch schema"),
        Check("16.8", check_all_rows, "lab: all 15 matrix rows"),
        Check("16.9", check_budgets, "lab: three matrix rows' recovery times"),
        Check("16.10", check_two_deliveries, "lab: publish-before-mark with a slow first delivery"),
    ]


# ---------------------------------------------------------------- 16.1

def check_record(c) -> None:
    """The learner's record is evidence: its form, at least one pass, and every pass re-earned here."""
    rows, unreadable = learner_record()
    assert not unreadable, unreadable
    names = [r.get("case") for r in rows if isinstance(r, dict)]
    repeated = sorted({n for n in names if n and names.count(n) > 1})
    claimed = [r for r in rows if isinstance(r, dict) and r.get("result") == "pass"]
    jobs = [str(r.get("job_id")) for r in claimed]
    shared_jobs = sorted({j for j in jobs if jobs.count(j) > 1})
    c.note(t(f"{len(rows)} 行，其中 pass {len(claimed)} 行", f"{len(rows)} rows, {len(claimed)} of them pass"))
    problems = [p for row in rows for p in row_problems(row)]
    for problem in problems[:6]:
        c.note("  " + problem)
    assert not repeated, t(f"case 名称重复：{repeated}", f"repeated case names: {repeated}")
    assert not problems, t("记录里有没有证据支撑的结论（见上）：pass 只能来自实际运行，没跑的行保持 not_run",
                           "the record claims results its evidence does not support (above): pass only from a real "
                           "run, rows not run stay not_run")
    assert not shared_jobs, t(f"几行写了同一个 job_id {shared_jobs}：每次演练都用一个新任务",
                              f"several rows name the same job_id {shared_jobs}: each drill runs on a fresh job")
    unknown = sorted(r["case"] for r in claimed if r["case"] not in CASE_IDS)
    assert not unknown, t(f"{unknown} 不是 failure-matrix.md 里的案例：无法重新运行来核对",
                          f"{unknown} are not cases of failure-matrix.md: there is nothing to re-run them with")
    listing = "; ".join(f"{r.get('case') if isinstance(r, dict) else '?'}: {why_not_backed(r)}" for r in rows)
    assert claimed, t(f"没有任何一行有证据支撑：{listing}。做一次演练，写下读到的事实，再把这一行标为 pass",
                      f"no row is backed by evidence: {listing}. Run a drill, write down what you read, then mark "
                      "that row pass")

    # Your job ids name jobs of your own drills, in a database no check run sees: each claim is re-earned
    # instead — run again on your code, backed by this run's database and deliveries, and saying what it shows.
    run = run_rows(c, [r["case"] for r in claimed],
                   t("你标为 pass 的行，在你的代码上重新运行", "the rows you marked pass, run again on your code"),
                   yours={r["case"]: r for r in claimed})
    versions = {UUID(r["job_id"]).version for r in run.values() if r.get("job_id")}
    c.note(t(f"你标为 pass 的 {len(claimed)} 行已在你的代码上重新运行；本次记录：{RECORD}",
             f"the {len(claimed)} rows you marked pass were run again on your code; this run's record: {RECORD}"))
    unbacked = []
    for mine in claimed:
        here = run[mine["case"]]
        found = claim_problems(mine, here, versions)
        if here["result"] == "pass":
            found += backing_problems(here)
        states = "→".join(collapse(real_statuses(here["observed_states"])))
        this_job = short(here["job_id"]) if here.get("job_id") else "-"
        c.note(t(f"  {'✓' if not found else '✗'} {mine['case']}：你的任务 {short(str(mine['job_id']))}；本次任务 "
                 f"{this_job}：{states}，attempts {here['attempts']}",
                 f"  {'✓' if not found else '✗'} {mine['case']}: your job {short(str(mine['job_id']))}; this run's "
                 f"job {this_job}: {states}, attempts {here['attempts']}"))
        unbacked += found
    for problem in unbacked[:6]:
        c.note("  " + problem)
    assert not unbacked, t(f"{len(unbacked)} 处记录没有被本次运行的事实支撑：{unbacked[0]}",
                           f"{len(unbacked)} claim(s) of the record are not backed by this run's facts: {unbacked[0]}")


# ---------------------------------------------------------------- 16.2

def check_terminal(c) -> None:
    assert (WORK / "verify_terminal.py").is_file(), t("文件夹里没有 verify_terminal.py",
                                                      "the folder has no verify_terminal.py")
    lab = Shared.get_lab()
    helper = Row(None, lab)
    job = lab.state_store.submit_snapshot(lab.product(3))
    real = settle(helper, job)
    for line in helper.notes:
        c.note(line)
    sha, where = artifact_evidence(real)  # the kit's own look first: inside artifacts/, JSON == payload
    c.note(t(f"worker 完成的任务 {short(job)}：{where}（sha256 {sha[:10]}…）在 artifacts 内，内容等于 payload",
             f"job {short(job)} run by the worker: {where} (sha256 {sha[:10]}…) inside artifacts, content == "
             f"payload"))
    payload = payload_of(real)
    cases = terminal_cases(job, payload)

    wrong_answers = []
    for label, job_id, should_pass, expected in cases:
        code, output = run_terminal(job_id)
        verified = "artifact verified" in output
        last = (output.strip().splitlines() or [""])[-1][:120]
        c.note(t(f"  {label}：退出码 {code} → {last}", f"  {label}: exit {code} → {last}"))
        if should_pass:
            if code != 0 or expected not in output:
                wrong_answers.append(t(f"{label}：应退出 0 并打印 {expected}", f"{label}: should exit 0 and print {expected}"))
        elif code == 0 or verified:
            wrong_answers.append(t(f"{label}：应失败（非 0 退出、不打印 artifact verified）",
                                   f"{label}: should fail (non-zero exit, no 'artifact verified')"))
    assert not wrong_answers, "; ".join(wrong_answers) + t(
        "。verify_terminal 要 resolve 后检查 is_relative_to(artifacts)，并用 decode_payload 的值与文件 JSON 比较",
        ". verify_terminal must resolve and check is_relative_to(artifacts), and compare the file's JSON with "
        "decode_payload's values")


# ---------------------------------------------------------------- 16.3 / 16.4 / 16.8 / 16.9

def check_rows(c, names: list[str]) -> None:
    rows = run_rows(c, names, t(f"故障矩阵：{len(names)} 行", f"failure matrix: {len(names)} rows"))
    require_pass(c, rows, names)


def check_all_rows(c) -> None:
    run_rows(c, CASE_IDS, t(f"故障矩阵：全部 {len(CASE_IDS)} 行", f"failure matrix: all {len(CASE_IDS)} rows"))
    rows = Shared.matrix.record()["cases"]
    c.note(t(f"记录：{RECORD}", f"record: {RECORD}"))
    for row in rows:
        c.note(describe(row) + (f" — {row['error'][:140]}" if row.get("error") else ""))
    assert [r["case"] for r in rows] == CASE_IDS, t("记录应按矩阵顺序含 15 行", "the record must hold the 15 rows in order")
    failed = [r for r in rows if r["result"] != "pass"]
    assert not failed, t(f"{15 - len(failed)}/15 通过；未通过：{', '.join(r['case'] for r in failed)}",
                         f"{15 - len(failed)}/15 pass; not passed: {', '.join(r['case'] for r in failed)}")
    problems = [p for r in rows for p in row_problems(r)]
    assert not problems, t(f"记录与规则不符：{problems[0]}", f"the record breaks the rules: {problems[0]}")
    assert all(r.get("faults_injected") == 1 for r in rows), t("每行必须恰好注入一个故障", "each row must inject exactly one fault")
    mains = [r["job_id"] for r in rows]
    every = [j for r in rows for j in r.get("job_ids", [])]
    assert len(set(every)) == len(every), t("不同的行共用了任务：每行要用新任务", "rows shared a job: each row needs fresh jobs")
    unbacked = [p for row in rows for p in backing_problems(row)]  # still true now: database, deliveries, files
    assert not unbacked, t(f"记录与数据库、投递或文件不一致：{unbacked[0]}",
                           f"the record disagrees with the database, the deliveries or the files: {unbacked[0]}")
    redispatched = [f"{r['case']}: {d['reason']}" for r in rows for d in r.get("redispatches") or []]
    for line in redispatched:
        c.note(t("  重新派发 ", "  re-dispatched ") + line)
    c.note(t(f"15/15 pass；15 个不同的主任务（{len(set(mains))}），每行一个故障；记录与数据库、文件一致；"
             f"重新派发 {len(redispatched)} 次（只在数据库拒绝了 claim 之后）",
             f"15/15 pass; 15 distinct main jobs ({len(set(mains))}), one fault per row; the record agrees with the "
             f"database and the files; {len(redispatched)} re-dispatch(es) (only after the database refused a claim)"))


def check_budgets(c) -> None:
    names = ROWS_FOR["16.9"]
    rows = run_rows(c, names, t("故障矩阵：有恢复预算的行", "failure matrix: the rows with a recovery budget"))
    over = []
    for name in names:
        row = rows[name]
        assert row["result"] == "pass" and row.get("recovery_seconds") is not None, t(
            f"{name} 没有通过，无法核对恢复预算：{row.get('error') or row['result']}",
            f"{name} did not pass, so its budget cannot be checked: {row.get('error') or row['result']}")
        budget = row["budget_seconds"]
        detail = t(f"实测 {row['measured_seconds']} s + 移动的持久时间 {row['time_moved_seconds']} s",
                   f"measured {row['measured_seconds']} s + durable time moved {row['time_moved_seconds']} s")
        if name == "worker_exit_with_lease":
            detail += t(f"（退避 {row.get('backoff_seconds')} s）", f" (backoff {row.get('backoff_seconds')} s)")
            what = t("租约到期 → 重新领取", "lease expired → claimed again")
        else:
            what = t("派发 → 重新领取", "dispatch → claimed again")
            if row.get("unclaimed_age_seconds") is not None:
                detail += t(f"（扫描在派发 {row['unclaimed_age_seconds']:.0f} s 后补发）",
                            f" (the scan resent {row['unclaimed_age_seconds']:.0f} s after the dispatch)")
        # A re-dispatch after the database refused a claim is a second fault, not the path this budget
        # measures: its seconds are shown, and left out of the comparison.
        extra = round(sum(r["seconds"] for r in row.get("redispatches") or [] if r.get("during_recovery")), 3)
        path = round(row["recovery_seconds"] - extra, 3)
        if extra:
            detail += t(f"；其中 {extra} s 来自 claim 被数据库拒绝后的重新派发，不计入本路径",
                        f"; {extra} s of it came from re-dispatching after the database refused a claim, left out of "
                        "this path")
        ok = path <= budget
        c.note(f"{name}: {what} {path} s {'≤' if ok else '>'} {budget:g} s — {detail}")
        if not ok:
            over.append(name)
    assert not over, t(f"超出恢复预算：{', '.join(over)}。检查扫描周期、退避（过期租约 10 秒）、未领取阈值（60 秒）与队列等待",
                       f"over the recovery budget: {', '.join(over)}. Check the scan period, the backoff (10 s for an "
                       "expired lease), the unclaimed threshold (60 s) and the queue wait")


# ---------------------------------------------------------------- 16.5

def check_durable_waits(c) -> None:
    store = learner("state_store")
    recovery = learner("recovery")
    product = [int(sql("SELECT MIN(id) AS id FROM products")[0]["id"])]
    made: list[str] = []
    try:
        # (a) a re-dispatch: sent, lost, overdue → a new event, attempts untouched; only the claim counts
        lost = store.submit_snapshot(product)
        made.append(lost)
        sql("UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE job_id=%s", (lost,))
        sql("UPDATE export_jobs SET last_dispatched_at=NOW(6) WHERE id=%s", (lost,))
        advance(lost, 61)
        recovery.recover_batch()
        recovery.recover_batch()
        after = job_row(lost)
        pending = pending_of(lost)
        c.note(t(f"已派发 61 秒未领取 → 扫描 2 次：待发事件 {len(pending)}，attempts {after['attempts']}，{after['status']}",
                 f"dispatched 61 s ago, unclaimed → 2 scans: {len(pending)} pending event(s), attempts "
                 f"{after['attempts']}, {after['status']}"))
        assert after["status"] == "queued" and len(pending) == 1, t(
            "已派发未领取的任务应回到 queued 并恰好有 1 条新事件", "a sent-but-unclaimed job must be queued with exactly one new event")
        assert after["attempts"] == 0, t(f"重新派发把 attempts 改成了 {after['attempts']}：只有真正的 claim 才能加一",
                                         f"re-dispatching set attempts to {after['attempts']}: only a real claim "
                                         f"may add one")
        got = store.claim(lost)
        assert got is not None and got["attempts"] == 1, t("恢复后的第一次 claim 应成功且 attempts=1",
                                                           "the first claim after recovery must work with attempts=1")
        c.note(t("随后的 claim → attempts 1（只有领取计数）", "the next claim → attempts 1 (only claims count)"))

        # (b) an expired lease: requeued with a future next_attempt_at; its event waits for the same moment
        slow = store.submit_snapshot(product)
        made.append(slow)
        first = store.claim(slow)
        assert first is not None, t("新任务应能被领取", "a fresh job must be claimable")
        advance(slow, seconds_until(slow, "lease_until") + 0.001)
        recovery.recover_batch()
        row = job_row(slow)
        wait = seconds_until(slow, "next_attempt_at")
        newest = sql("SELECT available_at, (available_at > NOW(6)) AS later, "
                        "(available_at = (SELECT next_attempt_at FROM export_jobs WHERE id=%s)) AS same "
                        "FROM export_outbox WHERE job_id=%s AND sent_at IS NULL ORDER BY created_at DESC, id LIMIT 1",
                        (slow, slow))
        early = store.claim(slow)
        c.note(t(f"租约过期 → 扫描：{row['status']}，next_attempt_at 在 {wait:.1f} 秒后；新事件 available_at 相同："
                 f"{bool(newest and newest[0]['same'])}；此时 claim → {early and early['attempts']}",
                 f"lease expired → scan: {row['status']}, next_attempt_at {wait:.1f}s ahead; the new event's "
                 f"available_at is the same: {bool(newest and newest[0]['same'])}; claim now → "
                 f"{early and early['attempts']}"))
        assert row["status"] == "queued" and wait > 0, t("过期租约应回到 queued，且 next_attempt_at 在未来",
                                                         "an expired lease must come back queued with "
                                                         "next_attempt_at ahead")
        assert newest and newest[0]["later"] and newest[0]["same"], t(
            "恢复事件的 available_at 应等于 next_attempt_at（publisher 不会提前发送）",
            "the recovery event's available_at must equal next_attempt_at (the publisher must not send early)")
        assert early is None and job_row(slow)["attempts"] == 1, t(
            "退避期内的 claim 不能成功，也不能增加 attempts", "a claim during the backoff must fail and leave attempts alone")

        # (c) past the deadline: a queued job and an expired running job both end failed, never re-sent
        queued_late = store.submit_snapshot(product)
        running_late = store.submit_snapshot(product)
        made += [queued_late, running_late]
        assert store.claim(running_late) is not None, t("新任务应能被领取", "a fresh job must be claimable")
        events_before = {j: len(events_of(j)) for j in (queued_late, running_late)}
        advance([queued_late, running_late], 601)  # ten minutes and a second pass
        recovery.recover_batch()
        for job_id, label in ((queued_late, "queued"), (running_late, "running")):
            row = job_row(job_id)
            letters = dead_letters(job_id)
            new_events = len(events_of(job_id)) - events_before[job_id]
            c.note(t(f"{label} 任务超过 deadline → {row['status']}，dead letter {[d['reason'] for d in letters]}，"
                     f"新事件 {new_events}", f"{label} job past its deadline → {row['status']}, dead letter "
                     f"{[d['reason'] for d in letters]}, new events {new_events}"))
            assert row["status"] == "failed" and letters and new_events == 0, t(
                f"超过 deadline 的 {label} 任务应转为 failed 并写 dead letter，不再重新派发",
                f"a {label} job past its deadline must become failed with a dead letter, never re-sent")
            assert store.claim(job_id) is None, t("超过 deadline 的任务不能再被领取", "a job past its deadline cannot be claimed")
    finally:
        park(made)


# ---------------------------------------------------------------- 16.6

def check_phase_logs(c) -> None:
    lab = Shared.get_lab()
    helper = Row(None, lab)
    job = lab.state_store.submit_snapshot(lab.product(2))
    final = settle(helper, job)
    delivered = [d["task_id"] for d in deliveries(job)]
    # The task writes its phase lines before it returns, and the probe writes a delivery's end after
    # the task returned: once every delivery has ended, every line is in the log.
    lab.wait_ended(job, len(delivered))
    lines = [p for p in phase_lines(lab.worker.log_text()) if p.get("job_id") == job]
    for line in lines[:4]:
        c.note("  " + json.dumps(line, ensure_ascii=False)[:220])
    assert lines, t("worker 日志里没有这个任务的 JSON 阶段日志（event=export_phase）：在领取后和完成后调用 log_phase",
                    "the worker log has no JSON phase line (event=export_phase) for the job: call log_phase after "
                    "the claim and after finishing")
    keys = ("job_id", "phase", "message_id", "lease_token", "attempt")
    missing = sorted({k for line in lines for k in keys if k not in line})
    assert not missing, t(f"阶段日志缺少字段：{missing}", f"phase lines lack the fields {missing}")
    claimed = [line for line in lines if line.get("lease_token")]
    assert claimed, t("没有一行带 lease_token：领取后的日志要写本次 token", "no line carries a lease_token: log the claim's token")
    first = claimed[0]
    assert first["message_id"] in delivered, t(
        f"message_id {first['message_id']!r} 不是 worker 实际收到的消息 id {delivered}：用 bind=True 和 self.request.id",
        f"message_id {first['message_id']!r} is not the delivered message id {delivered}: use bind=True and "
        "self.request.id")
    assert str(first["lease_token"]) == str(final["lease_token"]), t(
        "日志里的 lease_token 与数据库中这次领取的 token 不同", "the logged lease_token differs from the claim's token in the database")
    assert first["attempt"] == final["attempts"] == 1, t(
        f"attempt 应为真实的 attempts（1），实际 "
        f"{first['attempt']!r}", f"attempt must be the real attempts (1), got {first['attempt']!r}")
    c.note(t(f"{len(lines)} 行；message_id = 投递的 task id，lease_token = 数据库 token，attempt = 1",
             f"{len(lines)} lines; message_id = the delivered task id, lease_token = the database token, attempt = 1"))

    text = worker_logs(lab)
    leaks = log_leaks(text)
    c.note(t(f"扫描 worker 日志 {len(text.splitlines())} 行：商品描述、密码、带凭据 URL → {'发现' if leaks else '都没有'}",
             f"scanned {len(text.splitlines())} worker log lines for descriptions, passwords, URLs with credentials → "
             f"{'found' if leaks else 'none'}"))
    assert not leaks, t(f"日志里出现了{'、'.join(leaks)}：log_phase 只记录编号和阶段，不放 payload 或连接信息",
                        f"the logs contain {', '.join(leaks)}: log_phase records ids and phases only, never the "
                        f"payload "
                        "or connection details")


# ---------------------------------------------------------------- 16.7

def check_monitor(c) -> None:
    from shared.labctl import split_sql
    path = WORK / "monitor_exports.sql"
    assert path.is_file(), t("文件夹里没有 monitor_exports.sql", "the folder has no monitor_exports.sql")
    statements = split_sql(path.read_text(encoding="utf-8"))
    with scratch_schema() as cur:
        load_schemas(cur)
        empty = run_monitor(cur, statements)
        unpublished = pick(empty, "oldest_unpublished_seconds")[0]
        dispatch = pick(empty, "oldest_dispatch_age")[0]
        c.note(t(f"空库：unpublished={unpublished['unpublished']} 年龄={unpublished['oldest_unpublished_seconds']}；"
                 f"queued_without_pending={dispatch['queued_without_pending']} "
                 f"年龄={dispatch['oldest_dispatch_age']}",
                 f"empty: unpublished={unpublished['unpublished']} "
                 f"age={unpublished['oldest_unpublished_seconds']}; "
                 f"queued_without_pending={dispatch['queued_without_pending']} "
                 f"age={dispatch['oldest_dispatch_age']}"))
        assert unpublished["oldest_unpublished_seconds"] is None and dispatch["oldest_dispatch_age"] is None, t(
            "没有对应行时年龄必须是 NULL，不能写成 0（不要 COALESCE/IFNULL）",
            "with no matching rows the ages must be NULL, not 0 (no COALESCE/IFNULL)")
        assert int(unpublished["unpublished"]) == 0 and int(pick(empty, "expired_leases")[0]["expired_leases"]) == 0

        ids = insert_known_rows(cur)
        before = server_now(cur)
        full = run_monitor(cur, statements)
        after = server_now(cur)
        waiting, dispatched = waiting_since(cur, ids)
    statuses = {r["status"]: int(r["total"]) for r in pick(full, "total")}
    unpublished = pick(full, "oldest_unpublished_seconds")[0]
    expired = int(pick(full, "expired_leases")[0]["expired_leases"])
    reasons = {r["reason"]: int(r["failed"]) for r in pick(full, "reason")}
    dispatch = pick(full, "oldest_dispatch_age")[0]
    listing = [r["id"] for r in pick(full, "next_attempt_at")]
    age_new = number(unpublished["oldest_unpublished_seconds"])
    age_sent = number(dispatch["oldest_dispatch_age"])
    c.note(t(f"已知数据：状态 {statuses}；未发 {unpublished['unpublished']} 个，最老 {age_new} s；过期租约 {expired}；"
             f"失败原因 {reasons}；已派发无待发 {dispatch['queued_without_pending']} 个，最老 {age_sent} s；列表 {len(listing)} 行",
             f"known rows: statuses {statuses}; unpublished {unpublished['unpublished']}, oldest {age_new} s; "
             f"expired "
             f"leases {expired}; reasons {reasons}; queued without pending {dispatch['queued_without_pending']}, "
             f"oldest {age_sent} s; list {len(listing)} rows"))
    assert statuses == {"queued": 2, "running": 1, "failed": 1}, t(f"状态计数不对：{statuses}",
                                                                   f"wrong status counts: {statuses}")
    low, high = age_bounds(waiting, before, after)
    assert int(unpublished["unpublished"]) == 1 and age_new is not None and low <= age_new <= high, t(
        f"未发事件应为 1 个、最老约 42 秒（{low:.3f}…{high:.3f}），实际 {unpublished['unpublished']} / {age_new}",
        f"expected 1 unpublished event about 42 s old ({low:.3f}…{high:.3f}), got {unpublished['unpublished']} / "
        f"{age_new}")
    assert expired == 1, t(f"过期租约应为 1，实际 {expired}", f"expected 1 expired lease, got {expired}")
    assert reasons == {"attempts_exhausted": 1}, t(f"失败原因计数不对：{reasons}", f"wrong failure reasons: {reasons}")
    low, high = age_bounds(dispatched, before, after)
    assert int(dispatch["queued_without_pending"]) == 1 and age_sent is not None and low <= age_sent <= high, t(
        f"已派发无待发应为 1 个、约 75 秒（{low:.3f}…{high:.3f}），实际 {dispatch['queued_without_pending']} / "
        f"{age_sent}",
        f"expected 1 queued job without pending, about 75 s ({low:.3f}…{high:.3f}), got "
        f"{dispatch['queued_without_pending']} / {age_sent}")
    assert listing == [ids["q_sent"], ids["q_new"], ids["running"]], t(
        "最后一个查询应按 created_at 列出 queued/running 任务", "the last query must list queued/running jobs by created_at")


# ---------------------------------------------------------------- 16.10

def check_two_deliveries(c) -> None:
    lab = Shared.get_lab()
    job = lab.state_store.submit_snapshot(lab.product(4))
    event = pending_of(job)[0]["id"]
    helper = Row(None, lab)
    hold(job)
    try:
        # Delivery 1 of the event: the confirm write is lost, so the event stays unsent.
        with confirm_lost(event):
            for sent in (1, 2):
                with contextlib.suppress(Exception):  # the lost confirm is the drill
                    with publishing():
                        lab.publisher.publish_one()
                wait_until(lambda sent=sent: holds(job) or len(ended(job)) >= sent, 60,
                           t("这次投递领取（停在写文件处）或结束", "the delivery to claim (hold its write) or end"),
                           interval=0.05)
                if holds(job):
                    break
                # It ended without a claim.  Only a claim the database refused is the system's to repeat:
                # the unconfirmed event goes out again once the publisher's claim runs out (moved).
                reason = unclaimed_reason(job, {"task_id": event, "end": ended(job)[-1]})
                assert sent == 1, reason
                c.note(t("再次发送未确认的事件：", "the unconfirmed event is sent again: ") + reason)
                advance(job, claim_seconds_left(job) + 0.001)
        assert holds(job), t("worker 一直没有领取这个任务", "the worker never claimed the job")
        token_a = job_row(job)["lease_token"]
        # The first execution is slow: its lease runs out while it writes, recovery requeues the job and
        # the unmarked event goes out again once the publisher's claim is over (all moved, not waited).
        advance(job, seconds_until(job, "lease_until") + 0.001)
        scan_until(lab, job, ("queued",))
        advance(job, max(seconds_until(job, "next_attempt_at"), claim_seconds_left(job)) + 0.001)
        final = settle(helper, job)
    finally:
        release(job)
    lab.drain()
    starts = deliveries(job)
    # Every delivery ended (the held one too, once released): each wrote its phase lines before that.
    lab.wait_ended(job, len(starts))
    lines = [p for p in phase_lines(lab.worker.log_text()) if p.get("job_id") == job]
    for line in lines[:8]:
        c.note("  " + json.dumps({k: line.get(k) for k in line if k != "event"}, ensure_ascii=False)[:200])
    claims = [p for p in lines if p.get("lease_token")]
    tokens = list(dict.fromkeys(str(p["lease_token"]) for p in claims))
    messages = {p.get("message_id") for p in claims}
    c.note(t(f"投递 {len(starts)} 次（message id：{sorted({short(s['task_id']) for s in starts})}）；日志里的 token："
             f"{[short(x) for x in tokens]}；数据库 result_ref 属于 token {short(final['lease_token'])}",
             f"{len(starts)} deliveries (message ids {sorted({short(s['task_id']) for s in starts})}); tokens in "
             f"the "
             f"logs {[short(x) for x in tokens]}; the database result_ref belongs to token "
             f"{short(final['lease_token'])}"))
    delivered = {d["task_id"] for d in starts}
    again = [d for d in starts if d["task_id"] == event]
    assert len(tokens) >= 2, t("日志里应能看到两个不同的 lease_token（两次领取）",
                               "the logs must show two different lease_tokens (two claims)")
    assert len(again) >= 2, t(f"未确认的事件应送达两次，实际 {len(again)} 次",
                              f"the unconfirmed event should arrive twice, got {len(again)}")
    assert messages <= delivered, t(
        f"日志里的 message_id {sorted(map(str, messages - delivered))} 不是 worker 实际收到的消息 id",
        f"the logged message_id {sorted(map(str, messages - delivered))} is not a message id the worker received")
    for line in helper.notes:
        c.note(line)

    def outcome(token: str):
        values = [p.get(k) for p in claims if str(p["lease_token"]) == token
                  for k in ("success", "published") if isinstance(p.get(k), bool)]
        return values[-1] if values else None

    old, new = outcome(str(token_a)), outcome(str(final["lease_token"]))
    c.note(t(f"旧 token {short(token_a)} 的结果行：success={old}；新 token 的结果行：success={new}",
             f"old token {short(token_a)}'s outcome line: success={old}; the new token's: success={new}"))
    assert str(final["lease_token"]) != str(token_a), t("最终结果应属于新 token",
                                                        "the final result must belong to the new token")
    assert old is False, t("旧 token 的完成日志应报告没有发布（finish 返回 False）：记录 finish 的真实返回值",
                           "the old token's completion line must report no publish (finish returned False): log "
                           "finish's "
                           "real return value")
    assert new is True, t("新 token 的完成日志应报告发布成功", "the new token's completion line must report the publish")
    now = job_row(job)
    sha, where = artifact_evidence(now)
    assert now["lease_token"] == final["lease_token"] and str(token_a) not in where, t(
        "result_ref 应是新 token "
        "的文件，旧执行写的文件不被引用", "result_ref must be the new token's file; the old run's file stays unreferenced")
    c.note(t(f"唯一的 result_ref：{where}（sha256 {sha[:10]}…，内容等于 payload）",
             f"the one result_ref: {where} (sha256 {sha[:10]}…, content == payload)"))


# ---------------------------------------------------------------- main

if __name__ == "__main__":
    run(checks(), setup=lambda: Shared.prepare(ROWS_FOR, NEEDS_LAB), teardown=Shared.stop)
