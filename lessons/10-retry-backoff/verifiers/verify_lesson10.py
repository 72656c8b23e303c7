"""Verifier for lesson 10: retries with a count, backoff, jitter and a deadline — counted, not guessed.

The lesson's worker runs the learner's app through lab10_probe.py (see tasks.json), which records
every execution, every fetch_snapshot call and every planned retry countdown, and shrinks
backoff_base/backoff_max when the task declares them, so no check waits out the real delays.

10.1  python verify_retry.py prints {'rows': 1} for fail_until=2; a job of ours with fail_until=2
      runs 3 times (2 retries, attempts 0, 1, 2) and succeeds with rows == 1
10.2  a job whose deadline passed fails with "export deadline exceeded" after 0 reads
10.3  a job whose read raises ValueError (injected by the probe) runs once: 1 read, 0 retries
10.4  fail_until=10: exactly 1 + 3 executions and reads, then FAILURE with the temporary error
10.5  every planned countdown n lies in [0, min(backoff_max, backoff_base * 2**n)] and every execution
      carries the producer's deadline_epoch unchanged
10.6  exercise: a 0.05 s budget fails at once with "insufficient retry budget": 1 read, 0 retries
"""

from __future__ import annotations

import ast
import json
import subprocess
import time
from uuid import uuid4

from shared.celerylab import LOG_DIR, WORK, DeclaredWorker, log_lines, redact

from shared.i18n import t
from shared.proc import WaitTimeout, run_python, wait_until

EVENTS = LOG_DIR / "retry-events.jsonl"
PERMANENT = LOG_DIR / "retry-permanent.txt"
TERMINAL = ("SUCCESS", "FAILURE", "REVOKED")
DEFAULT_BACKOFF = {"backoff_base": 1.0, "backoff_max": 8.0}  # the course's caps: min(8, 2**n)


def _task():
    try:
        from retry_tasks import retry_export
    except Exception as exc:  # noqa: BLE001 - any import failure is the learner's to see
        raise AssertionError(t(f"无法导入 retry_tasks.retry_export：{type(exc).__name__}: {exc}",
                               f"cannot import retry_tasks.retry_export: {type(exc).__name__}: {exc}")) from None
    return retry_export


def events(kind: str | None = None, task_id: str | None = None) -> list[dict]:
    if not EVENTS.exists():
        return []
    found = [json.loads(line) for line in EVENTS.read_text().splitlines() if line.strip()]
    return [e for e in found
            if (kind is None or e["kind"] == kind) and (task_id is None or e.get("task_id") == task_id)]


def backoff() -> dict:
    """The backoff the worker really used: the probe's shrunk values, or the course's defaults."""
    knobs = events("knobs")
    values = dict(DEFAULT_BACKOFF)
    if knobs:
        values.update({k: v for k, v in knobs[-1].items() if k in DEFAULT_BACKOFF})
    return values


class Run:
    """One submitted job and what the probe saw of it."""

    def __init__(self, deadline: float, fail_until: int, permanent: bool = False):
        retry_export = _task()
        self.job_id = str(uuid4())
        if permanent:
            with open(PERMANENT, "a", encoding="utf-8") as stream:
                stream.write(self.job_id + "\n")
        self.deadline, self.fail_until = deadline, fail_until
        self.result = retry_export.apply_async(args=[self.job_id, deadline, fail_until])
        self.id = self.result.id

    def wait(self, seconds: float = 45) -> str:  # bounded; generous for a loaded 2-core machine
        try:
            wait_until(lambda: self.result.state in TERMINAL, seconds, f"{self.id} to finish")
        except WaitTimeout:
            pass
        # the end event follows the stored state within moments; wait for it so counts are final
        try:
            wait_until(lambda: any(e.get("state") in TERMINAL for e in events("end", self.id)), 5, "the last execution")
        except WaitTimeout:
            pass
        return self.result.state

    @property
    def starts(self) -> list[dict]:
        return events("start", self.id)

    @property
    def reads(self) -> list[dict]:
        return events("read", self.id)

    @property
    def retries(self) -> list[dict]:
        return events("retry", self.id)

    def error(self) -> str:
        value = self.result.result
        return redact(f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else repr(value))

    def summary(self) -> str:
        return t(f"执行 {len(self.starts)} 次，读取 {len(self.reads)} 次，计划重试 {len(self.retries)} 次，"
                 f"终态 {self.result.state}",
                 f"{len(self.starts)} execution(s), {len(self.reads)} read(s), {len(self.retries)} planned retr"
                 f"{'y' if len(self.retries) == 1 else 'ies'}, final state {self.result.state}")


def _worker_alive(worker: DeclaredWorker) -> None:
    assert worker.alive(), t(f"worker（pid {worker.pid}）已退出，日志末尾：\n{worker.log_text()[-600:]}",
                             f"the worker (pid {worker.pid}) has exited; log tail:\n{worker.log_text()[-600:]}")


# ---------------------------------------------------------------- 10.1

def check_recovers(c, worker: DeclaredWorker, runs: dict) -> None:
    _worker_alive(worker)
    try:
        done = run_python(["verify_retry.py"], cwd=WORK, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(t("verify_retry.py 60 秒内没有结束",
                               "verify_retry.py did not finish within 60 s")) from None
    lines = [redact(line.strip()) for line in done.stdout.splitlines() if line.strip()]
    runs["verify_retry"] = lines
    c.note(t(f"python verify_retry.py → 退出码 {done.returncode}",
             f"python verify_retry.py → exit code {done.returncode}"))
    for line in lines[-3:]:
        c.note("  " + line[:200])
    first = None
    for line in lines:
        if line.startswith("{"):
            try:
                first = ast.literal_eval(line)
            except (ValueError, SyntaxError):
                pass
            break
    assert done.returncode == 0 and isinstance(first, dict) and first.get("rows") == 1, t(
        "verify_retry.py 的第一个结果应是 rows 为 1 的字典（fail_until=2 在两次重试后成功）",
        "verify_retry.py's first result should be a dict with rows 1 (fail_until=2 succeeds after two retries)")

    run = Run(time.time() + 30, 2)
    state = run.wait()
    attempts = [e["args"][0] if e.get("args") else None for e in run.reads]
    c.note(t(f"fail_until=2：{run.summary()}；fetch_snapshot 收到的 attempt = {attempts}",
             f"fail_until=2: {run.summary()}; fetch_snapshot got attempt = {attempts}"))
    assert state == "SUCCESS", t(f"fail_until=2 应在重试后成功，实际 {state}（{run.error()}）",
                                 f"fail_until=2 should succeed after retrying, got {state} ({run.error()})")
    assert len(run.retries) == 2 and len(run.starts) == 3, t(
        "应恰好两次重试、三次执行：attempt 要取 self.request.retries，并 raise self.retry(...)",
        "expected exactly two retries and three executions: pass self.request.retries as the attempt and "
        "raise self.retry(...)")
    assert run.result.result.get("rows") == 1, t(f"rows 应为 1，实际 {run.result.result!r}",
                                                  f"rows should be 1, got {run.result.result!r}")
    runs["recovers"] = run


# ---------------------------------------------------------------- 10.2

def check_expired(c, worker: DeclaredWorker, runs: dict) -> None:
    _worker_alive(worker)
    run = Run(time.time() - 1, 0)
    state = run.wait()
    c.note(t(f"deadline 已过 1 秒、fail_until=0：{run.summary()}，错误 {run.error()}",
             f"deadline 1 s in the past, fail_until=0: {run.summary()}, error {run.error()}"))
    expired_line = [line for line in runs.get("verify_retry", []) if "deadline" in line]
    if expired_line:
        c.note(t("verify_retry.py 打印：", "verify_retry.py printed: ") + expired_line[0][:160])
    assert not run.reads, t(f"过期任务仍调用了 fetch_snapshot {len(run.reads)} 次：先检查 remaining <= 0，再读取",
                            f"the expired task still called fetch_snapshot {len(run.reads)} time(s): check remaining "
                            "<= 0 "
                            "before reading")
    assert state == "FAILURE" and "export deadline exceeded" in run.error(), t(
        f"过期任务应以 RuntimeError('export deadline exceeded') 失败，实际 {state} {run.error()}",
        f"the expired task should fail with RuntimeError('export deadline exceeded'), got {state} {run.error()}")
    assert len(run.starts) == 1 and not run.retries, t("过期任务不应重试", "an expired task must not retry")


# ---------------------------------------------------------------- 10.3

def check_permanent(c, worker: DeclaredWorker) -> None:
    _worker_alive(worker)
    run = Run(time.time() + 30, 0, permanent=True)
    state = run.wait()
    c.note(t(f"读取抛 ValueError('invalid export request')：{run.summary()}，错误 {run.error()}",
             f"the read raises ValueError('invalid export request'): {run.summary()}, error {run.error()}"))
    assert run.reads, t("任务没有调用 fetch_snapshot", "the task never called fetch_snapshot")
    assert len(run.starts) == 1 and len(run.reads) == 1 and not run.retries, t(
        f"永久错误被重试了（执行 {len(run.starts)} 次）：except 只捕获 TemporaryReadError",
        f"the permanent error was retried ({len(run.starts)} executions): catch only TemporaryReadError")
    assert state == "FAILURE" and "ValueError" in run.error(), t(
        f"应以 ValueError 失败，实际 {state} "
        f"{run.error()}", f"it should fail with the ValueError, got {state} {run.error()}")


# ---------------------------------------------------------------- 10.4

def check_limit(c, worker: DeclaredWorker, runs: dict) -> None:
    _worker_alive(worker)
    run = Run(time.time() + 60, 10)
    state = run.wait(30)
    runs["limit"] = run
    c.note(t(f"fail_until=10：{run.summary()}，错误 {run.error()}",
             f"fail_until=10: {run.summary()}, error {run.error()}"))
    for line in log_lines(worker.log_text(), run.id, "retry", limit=3):
        c.note("  " + line.split("] ", 1)[-1][:180])
    assert state == "FAILURE", t(f"fail_until=10 应最终失败，实际 {state}",
                                 f"fail_until=10 should end in FAILURE, got {state}")
    assert len(run.starts) == 4 and len(run.reads) == 4, t(
        f"应恰好执行 1 + 3 = 4 次，实际 {len(run.starts)} 次：max_retries=3 不含首次执行",
        f"expected exactly 1 + 3 = 4 executions, got {len(run.starts)}: max_retries=3 does not count the first run")
    assert "TemporaryReadError" in run.error(), t(f"最后的错误应是原来的 TemporaryReadError，实际 {run.error()}",
                                                 "the final error should be the original TemporaryReadError, got "
                                                 f"{run.error()}")


# ---------------------------------------------------------------- 10.5

def check_delays(c, worker: DeclaredWorker, runs: dict) -> None:
    _worker_alive(worker)
    chosen = [r for r in (runs.get("limit"), runs.get("recovers")) if r is not None]
    if not chosen:
        chosen = [Run(time.time() + 60, 10)]
        chosen[0].wait(30)
    knobs = backoff()
    base, top = knobs["backoff_base"], knobs["backoff_max"]
    shrunk = knobs != DEFAULT_BACKOFF
    formula = f"cap(n) = min({top:g}, {base:g} × 2^n)"
    c.note(t(formula + ("（探针缩小了 backoff_base/backoff_max）" if shrunk else "（课程默认值）"),
             formula + (" (the probe shrank backoff_base/backoff_max)" if shrunk else " (the course's defaults)")))
    planned = 0
    for run in chosen:
        delays = []
        for event in run.retries:
            n, when = event.get("retries"), event.get("when")
            cap = min(top, base * 2.0 ** n)
            assert isinstance(when, (int, float)), t(f"第 {n} 次重试没有数值 countdown（{when!r}）",
                                                     f"retry {n} has no numeric countdown ({when!r})")
            delays.append(f"n={n}: {when:.4f} ≤ {cap:g}")
            assert 0 <= when <= cap, t(f"第 {n} 次重试计划等待 {when:.4f} 秒，超出 [0, {cap:g}]："
                                       "delay = random.uniform(0, cap)",
                                       f"retry {n} planned a {when:.4f} s wait, outside [0, {cap:g}]: "
                                       "use delay = random.uniform(0, cap)")
            planned += 1
        deadlines = sorted({e["args"][1] for e in run.starts if len(e.get("args", [])) > 1})
        c.note(t(f"fail_until={run.fail_until}：" + ("；".join(delays) or "无重试"),
                 f"fail_until={run.fail_until}: " + ("; ".join(delays) or "no retries")))
        c.note(t(f"  {len(run.starts)} 次执行携带的 deadline_epoch：{deadlines}（提交时 {run.deadline}）",
                 f"  deadline_epoch carried by {len(run.starts)} executions: {deadlines} (submitted {run.deadline})"))
        assert deadlines == [run.deadline], t(
            "重试时 deadline_epoch 变了：不要给 retry 传新参数，更不要在 worker 里重新计算截止时间",
            "deadline_epoch changed on a retry: retry without new arguments, and never recompute the deadline in the "
            "worker")
    assert planned, t("没有观察到任何计划中的重试", "no planned retry was observed")


# ---------------------------------------------------------------- 10.6

def check_budget(c, worker: DeclaredWorker) -> None:
    _worker_alive(worker)
    for _ in range(3):
        run = Run(time.time() + 0.05, 2)
        state = run.wait()
        if run.reads or run.retries or "insufficient" in run.error():
            break
        # The message took longer than 0.05 s to reach the worker, so the entry check fired first:
        # no read happened and the exercise's branch was never reached.  Try again.
        c.note(t(f"消息在 0.05 秒内没到 worker（{run.error()}），重做一次", f"the message needed over 0.05 s to arrive "
                 f"({run.error()}); trying again"))
    c.note(t(f"预算 0.05 秒、fail_until=2（还剩 3 次重试）：{run.summary()}，错误 {run.error()}",
             f"a 0.05 s budget, fail_until=2 (3 retries left): {run.summary()}, error {run.error()}"))
    assert state == "FAILURE" and "insufficient retry budget" in run.error(), t(
        f"应以 RuntimeError('insufficient retry budget') 立即失败，实际 {state} {run.error()}：安排重试前比较 "
        "now + delay + 0.1 与 deadline",
        f"it should fail at once with RuntimeError('insufficient retry budget'), got {state} {run.error()}: compare "
        "now + delay + 0.1 with the deadline before scheduling a retry")
    assert len(run.starts) == 1 and len(run.reads) == 1 and not run.retries, t(
        "预算不足时不应安排任何重试", "with the budget too small no retry may be scheduled")


def main(tap) -> None:
    runs: dict = {}
    worker, missing = None, ""
    try:
        worker = DeclaredWorker()
    except AssertionError as exc:
        missing = str(exc)
    # Fresh records for this run (no task has run yet: the worker only just started).
    PERMANENT.unlink(missing_ok=True)
    EVENTS.unlink(missing_ok=True)
    for check_id, check in (("10.1", lambda c: check_recovers(c, worker, runs)),
                            ("10.2", lambda c: check_expired(c, worker, runs)),
                            ("10.3", lambda c: check_permanent(c, worker)),
                            ("10.4", lambda c: check_limit(c, worker, runs)),
                            ("10.5", lambda c: check_delays(c, worker, runs)),
                            ("10.6", lambda c: check_budget(c, worker))):
        with tap.check(check_id) as c:
            assert worker, missing
            check(c)


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
