"""Verifier for lesson 07's durable single-process task center (the taskcenter/ package).

07.5  transit() refuses illegal moves and the store enforces them; one idempotency key gives one
      row and one downstream call while the task lives (two connections submitting at once
      included), and is refused once the task has finished
07.6  retries against a real loopback server through httpx2: 503 then 200 -> success at attempt 2;
      400 -> failed after one call; 500/502/503 with max_attempts=3 -> failed after exactly 3 calls
      (a 4th would have succeeded); a refused connection is retried; a call the client gives up on
      (the server saw it hang up) is retried as a timeout; backoff stays within its jittered, capped
      bounds; the retry log line carries the structured fields
07.7  cancel at the three layers: pending (never called), claimed but not yet called (skipped),
      in flight -- httpx2.AsyncClient: the server sees the connection closed and never answers;
      blocking client in a thread: the request runs to its end and the result is discarded
07.8  `python -m taskcenter.main serve` is SIGKILLed while its task waits on a slow loopback
      server; a restart with the default threshold leaves the (young) running row alone, a
      restart with --stale-after 0 moves it back to pending and it completes at attempt 2
07.9  24 tasks: the first N=4 calls meet at a barrier in the server (so N really run at once), and a
      counter on the worker's side of the port never sees more than N
07.10 the FastAPI app under starlette's TestClient: 202 + Location, GET of it, 404s for unknown ids,
      and 422 with a readable message and no new row for bad bodies

The loopback downstream (lab07_loopback.py) is an http.server in a thread of this process on a free
127.0.0.1 port.
Retries are fast by configuration (tiny backoff base), nothing waits out a real delay.  A call times
out only where a check means it to: elsewhere the call timeout is far above any loopback answer, so
a busy machine cannot turn an answer into a retry.  Held requests end by facts -- the verifier's
release, or the client hanging up -- and what the server saw decides, never how long it took.
Logs go to .lab-logs/07/ in the working directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path

from lab07_loopback import HOLD_CAP, Loopback
from shared.celerylab import short
from shared.i18n import t
from shared.proc import Process, free_port, wait_until
from shared.tap import Check, main_guard, run

WORK = Path.cwd()
LOGS = WORK / ".lab-logs" / "07"
CALL_TIMEOUT = 30.0  # the worker's call timeout where no check means a call to time out
BOUND = 30.0  # backstop for waits that facts end in well under a second
TASKCENTER = WORK / "taskcenter" / "__init__.py"
LAB: Loopback | None = None  # the loopback downstream: started in main, before the checks


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  The taskcenter/ package is imported here; all but 07.10 call
    the loopback downstream (LAB, a server thread of this process); 07.8 also runs `python -m taskcenter.main serve`."""
    return [
        Check("07.5", lambda c: check_state_and_idempotency(c, LAB), "taskcenter imported; loopback; sqlite files"),
        Check("07.6", lambda c: check_retries(c, LAB), "taskcenter imported; loopback"),
        Check("07.7", lambda c: check_cancel(c, LAB), "taskcenter imported; loopback"),
        Check("07.8", lambda c: check_crash_recovery(c, LAB), "python -m taskcenter.main serve, killed and restarted"),
        Check("07.9", lambda c: check_concurrency(c, LAB), "taskcenter imported; loopback"),
        Check("07.10", check_http, "taskcenter's FastAPI app under TestClient"),
    ]


# ---------------------------------------------------------------- helpers

def _tc():
    """Import the package (inside a check, so a broken module fails that check only)."""
    import taskcenter.log

    LOGS.mkdir(parents=True, exist_ok=True)
    if not getattr(_tc, "stream", None):
        _tc.stream = open(LOGS / "inprocess.log", "a", encoding="utf-8")
        taskcenter.log.set_stream(_tc.stream)  # task logs to a file, the TAP lines stay readable
    import taskcenter
    return taskcenter


def _db(name: str) -> Path:
    LOGS.mkdir(parents=True, exist_ok=True)
    path = LOGS / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


async def until(predicate, timeout: float, what: str, interval: float = 0.01):
    """Poll predicate() on the event loop until it is truthy; fail the check after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(t(f"等了 {timeout:g} 秒仍未看到：{what}", f"waited {timeout:g} s for {what}"))
        await asyncio.sleep(interval)


@asynccontextmanager
async def running(worker):
    loop = asyncio.create_task(worker.run_forever())
    try:
        yield loop
    finally:
        try:
            await asyncio.wait_for(worker.stop(grace_s=0.3), BOUND)
        finally:
            if not loop.done():
                loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)


def _fast_worker(tc, store, down, **kw):
    from taskcenter.retry import Backoff
    from taskcenter.worker import Worker
    options = dict(concurrency=8, poll_interval=0.01, call_timeout=CALL_TIMEOUT,
                   backoff=Backoff(base_s=0.01, cap_s=0.05), stop_grace_s=0.3)
    options.update(kw)
    return Worker(store, down, **options)


def _final(store, tid):
    task = store.get(tid)
    return task if task.terminal else None


def _events(records, tid, event=None):
    return [r for r in records if r.get("task_id") == tid and (event is None or r.get("event") == event)]


# ---------------------------------------------------------------- 07.5

def check_state_and_idempotency(c, lab: Loopback) -> None:
    tc = _tc()
    from taskcenter.downstream import HttpxDownstream
    from taskcenter.models import ALLOWED, IllegalTransition, State, transit
    from taskcenter.store import IdempotencyConflict, Store

    refused = []
    for src, dst in [(State.SUCCESS, State.PENDING), (State.FAILED, State.RUNNING),
                     (State.CANCELED, State.PENDING), (State.PENDING, State.SUCCESS)]:
        try:
            transit(src, dst)
        except IllegalTransition:
            refused.append(f"{src.value}->{dst.value}")
            continue
        raise AssertionError(t(f"transit({src.value} -> {dst.value}) 没有抛 IllegalTransition",
                               f"transit({src.value} -> {dst.value}) did not raise IllegalTransition"))
    for src in (State.SUCCESS, State.FAILED, State.CANCELED):
        assert not ALLOWED[src], t(f"终态 {src.value} 不应有出路：{sorted(s.value for s in ALLOWED[src])}",
                                   f"terminal {src.value} must have no way out: {sorted(s.value for s in ALLOWED[src])}")
    assert transit(State.RUNNING, State.PENDING) is State.PENDING, t("running -> pending（重试）应被允许",
                                                                     "running -> pending (a retry) must be allowed")
    c.note(t(f"被拒绝的转换：{', '.join(refused)}", f"refused transitions: {', '.join(refused)}"))

    path = _db("idempotency.db")
    url = lab.script("idem", [200])
    stores = [Store.open(path), Store.open(path)]  # two connections to one file
    try:
        # Two connections submit the same key at the same moment.
        barrier = threading.Barrier(2)
        got: list = [None, None]

        def submit(i):
            barrier.wait(BOUND)
            got[i] = stores[i].submit(url, b'{"n": 1}', "same-key", 3)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(BOUND)
        assert all(got), t("并发提交没有完成", "the concurrent submits did not finish")
        ids = {task.id for task in got}
        rows = stores[0].count()
        assert len(ids) == 1 and rows == 1, t(
            f"同一幂等键的两次并发提交得到 {len(ids)} 个 id、{rows} 行；应为同一 id、一行（幂等键要 UNIQUE）",
            f"two concurrent submits of one key gave {len(ids)} ids and {rows} rows; expected one id, one row "
            "(the idempotency key needs UNIQUE)")
        tid = ids.pop()
        again = stores[1].submit(url, b'{"n": 1}', "same-key", 3)
        assert again.id == tid, t(f"任务未终结时再次提交应返回同一 id {tid}，实际 {again.id}",
                                  f"resubmitting while live must return the same id {tid}, got {again.id}")
        c.note(t(f"两个连接同时提交 same-key → 同一 id {short(tid)}，表里 1 行；再提交一次仍是它",
                 f"two connections submitting same-key at once → one id {short(tid)}, 1 row; a third submit returns it too"))

        store = stores[0]

        async def run():
            down = HttpxDownstream()
            try:
                async with running(_fast_worker(tc, store, down)):
                    await until(lambda: _final(store, tid), BOUND, "the task to finish")
            finally:
                await down.aclose()

        asyncio.run(run())
        final = store.get(tid)
        calls = lab.snapshot("idem")["calls"]
        assert final.state is State.SUCCESS, t(f"任务应成功，实际 {final.state.value}（{final.error}）",
                                               f"the task should succeed, got {final.state.value} ({final.error})")
        assert calls == 1, t(f"下游被调用 {calls} 次，应为 1 次", f"the downstream was called {calls} times, expected once")
        try:
            late = store.submit(url, b'{"n": 1}', "same-key", 3)
        except IdempotencyConflict as exc:
            c.note(t(f"成功后再用同一键提交被拒绝：{exc}", f"submitting the key again after success is refused: {exc}"))
        else:
            raise AssertionError(t(
                f"任务已终结（success）后同一键再次提交没有被拒绝，得到 id {late.id}（状态 {late.state.value}）",
                f"after the task finished (success) the same key was accepted again: id {late.id} "
                f"({late.state.value})"))
        assert store.count() == 1 and lab.snapshot("idem")["calls"] == 1, t(
            "拒绝之后表里应仍只有一行、下游仍只被调用一次", "after the refusal there must still be one row and one call")
        try:
            store.mark(tid, State.PENDING)
        except IllegalTransition:
            pass
        else:
            raise AssertionError(t("store.mark 把 success 改回了 pending：终态必须不可再改",
                                   "store.mark moved success back to pending: a terminal state must stay"))
        assert store.get(tid).state is State.SUCCESS, t("被拒绝的 mark 改动了记录", "the refused mark changed the row")
        c.note(t(f"下游共被调用 {calls} 次；store.mark(success → pending) 抛 IllegalTransition，记录不变",
                 f"the downstream saw {calls} call; store.mark(success → pending) raised IllegalTransition, row unchanged"))
    finally:
        for s in stores:
            s.close()


# ---------------------------------------------------------------- 07.6

def check_retries(c, lab: Loopback) -> None:
    tc = _tc()
    from taskcenter.downstream import HttpxDownstream
    from taskcenter.log import capture
    from taskcenter.models import State
    from taskcenter.retry import Backoff
    from taskcenter.store import Store

    # Backoff: bounded by the cap, jittered, growing.
    policy = Backoff(base_s=0.2, cap_s=1.0)
    for attempt in range(1, 9):
        ceiling = min(1.0, 0.2 * 2 ** (attempt - 1))
        low, high = policy.delay(attempt, rand=lambda: 0.0), policy.delay(attempt, rand=lambda: 1.0 - 1e-12)
        assert ceiling / 2 - 1e-9 <= low <= high <= ceiling + 1e-9, t(
            f"第 {attempt} 次后的退避 [{low:.3f}, {high:.3f}] 超出 [{ceiling / 2:.3f}, {ceiling:.3f}]",
            f"backoff after attempt {attempt} spans [{low:.3f}, {high:.3f}], outside [{ceiling / 2:.3f}, {ceiling:.3f}]")
    samples = [policy.delay(6) for _ in range(200)]
    assert max(samples) <= 1.0 + 1e-9, t(f"退避超过上限 1.0：{max(samples):.3f}", f"backoff above the 1.0 cap: {max(samples):.3f}")
    assert len({round(s, 6) for s in samples}) > 50, t("退避没有抖动：同一 attempt 总是同一个值",
                                                       "backoff has no jitter: one attempt always gives one value")
    c.note(t(f"退避（base 0.2，cap 1.0）：第 1 次 {policy.delay(1, rand=lambda: 0.5):.3f}s，第 6 次 200 个样本在 "
             f"[{min(samples):.3f}, {max(samples):.3f}]", f"backoff (base 0.2, cap 1.0): attempt 1 "
             f"{policy.delay(1, rand=lambda: 0.5):.3f}s, attempt 6: 200 samples in [{min(samples):.3f}, {max(samples):.3f}]"))

    store = Store.open(_db("retry.db"))
    cases = {
        # name: (script, max_attempts, expected state, expected attempt/calls)
        "r503": ([503, 200], 3, State.SUCCESS, 2),
        "r400": ([400, 200], 5, State.FAILED, 1),
        "r5xx": ([500, 502, 503, 200], 3, State.FAILED, 3),
    }
    ids = {}
    for name, (plan, max_attempts, _, _) in cases.items():
        ids[name] = store.submit(lab.script(name, plan), b"{}", f"retry-{name}", max_attempts).id
    refused_url = f"http://127.0.0.1:{free_port()}/nobody-listens"
    ids["refused"] = store.submit(refused_url, b"{}", "retry-refused", 2).id

    async def run(wanted: list[str], call_timeout: float):
        down = HttpxDownstream()
        try:
            async with running(_fast_worker(tc, store, down, call_timeout=call_timeout)):
                await until(lambda: all(_final(store, tid) for tid in wanted), BOUND, "the retry scenarios to finish")
        finally:
            await down.aclose()

    try:
        with capture() as records:
            asyncio.run(run(list(ids.values()), CALL_TIMEOUT))
        problems = []
        for name, (plan, max_attempts, want_state, want) in cases.items():
            task = store.get(ids[name])
            calls = lab.snapshot(name)["calls"]
            retried = [r.get("reason") for r in _events(records, ids[name], "task_retry")]
            c.note(t(f"{name}：{plan} max_attempts={max_attempts} → {task.state.value}，attempt {task.attempt}，"
                     f"调用 {calls} 次，重试原因 {retried}，error={task.error!r}",
                     f"{name}: {plan} max_attempts={max_attempts} → {task.state.value}, attempt {task.attempt}, "
                     f"{calls} call(s), retried after {retried}, error={task.error!r}"))
            if task.state is not want_state or task.attempt != want or calls != want:
                problems.append(t(f"{name}：应为 {want_state.value}、attempt {want}、调用 {want} 次；实际 "
                                  f"{task.state.value}、attempt {task.attempt}、调用 {calls} 次",
                                  f"{name}: expected {want_state.value} at attempt {want} with {want} calls; got "
                                  f"{task.state.value} at attempt {task.attempt} with {calls} calls"))
        refused = store.get(ids["refused"])
        retried = [r.get("reason") for r in _events(records, ids["refused"], "task_retry")]
        c.note(t(f"连接被拒绝，max_attempts=2 → {refused.state.value}，attempt {refused.attempt}，"
                 f"重试原因 {retried}，error={refused.error!r}",
                 f"refused connection, max_attempts=2 → {refused.state.value}, attempt {refused.attempt}, "
                 f"retried after {retried}, error={refused.error!r}"))
        if refused.state is not State.FAILED or refused.attempt != 2:
            problems.append(t(f"连接被拒绝应重试到 2 次后失败，实际 {refused.state.value}、attempt {refused.attempt}",
                              f"a refused connection should be retried up to 2 attempts then fail; got "
                              f"{refused.state.value} at attempt {refused.attempt}"))

        # The timeout case runs on its own, with a short call timeout: its first call is held until the
        # client gives up.  The status cases above keep a call timeout no loopback answer comes near.
        timeout_id = store.submit(lab.script("rtimeout", ["hold", 200]), b"{}", "retry-rtimeout", 5).id
        with capture() as timeout_records:
            asyncio.run(run([timeout_id], 2.0))
        task = store.get(timeout_id)
        snap = lab.snapshot("rtimeout")
        retried = [r.get("reason") for r in _events(timeout_records, timeout_id, "task_retry")]
        c.note(t(f"rtimeout：['hold', 200] call_timeout=2 max_attempts=5 → {task.state.value}，attempt {task.attempt}，"
                 f"调用 {snap['calls']} 次，服务器看到 {snap['outcomes']}，重试原因 {retried}",
                 f"rtimeout: ['hold', 200] call_timeout=2 max_attempts=5 → {task.state.value}, attempt {task.attempt}, "
                 f"{snap['calls']} call(s), the server saw {snap['outcomes']}, retried after {retried}"))
        # Facts, not durations: the held call can only end by the client hanging up (the server saw it),
        # that attempt was retried, and the task then succeeded with one attempt per call.  (On a very busy
        # machine a later call may time out too; it is then retried like the first.)
        if not (task.state is State.SUCCESS and "client_closed" in snap["outcomes"]
                and task.attempt == snap["calls"] >= 2 and retried):
            problems.append(t(
                f"rtimeout：第一次调用被挂住直到客户端超时放弃，应按超时重试并最终成功（每次调用一个 attempt）；实际 "
                f"{task.state.value}、attempt {task.attempt}、调用 {snap['calls']} 次、重试原因 {retried}",
                f"rtimeout: the first call hangs until the client gives up; it should be retried as a timeout and "
                f"then succeed (one attempt per call); got {task.state.value} at attempt {task.attempt} with "
                f"{snap['calls']} calls, retried after {retried}"))
        assert not problems, "\n".join(problems)
        retry_lines = _events(records, ids["r503"], "task_retry")
        assert retry_lines, t("503 之后没有 task_retry 日志行", "no task_retry log line after the 503")
        line = retry_lines[0]
        missing = [k for k in ("task_id", "state", "attempt", "duration_ms", "reason", "http_status") if k not in line]
        assert not missing, t(f"task_retry 日志缺少字段 {missing}：{line}", f"the task_retry log line lacks {missing}: {line}")
        c.note(t("日志：", "log: ") + json.dumps({k: line[k] for k in line if k != "ts"}, ensure_ascii=False))
    finally:
        store.close()


# ---------------------------------------------------------------- 07.7

def check_cancel(c, lab: Loopback) -> None:
    tc = _tc()
    from taskcenter.downstream import HttpxDownstream, ThreadDownstream
    from taskcenter.log import capture
    from taskcenter.models import State
    from taskcenter.store import Store

    # Layers 1 and 2 share one worker with a single slot, so tasks run strictly in order and a
    # sentinel submitted last proves the worker went past the canceled ones.
    target_cancel_after_claim: set[str] = set()

    class CancelRightAfterClaim(Store):
        """A cancel request that lands between the claim and the downstream call."""

        def claim_one(self, *args, **kwargs):
            task = super().claim_one(*args, **kwargs)
            if task is not None and task.id in target_cancel_after_claim:
                self.mark(task.id, State.CANCELED, error="canceled by the verifier after claim")
            return task

    store = CancelRightAfterClaim(tc.store.connect(_db("cancel-layers.db")))

    async def layers_1_2():
        down = HttpxDownstream()
        try:
            worker = _fast_worker(tc, store, down, concurrency=1)
            pending = await asyncio.to_thread(store.submit, lab.url("c-pending"), b"{}", "c-pending", 3)
            claimed = await asyncio.to_thread(store.submit, lab.url("c-claimed"), b"{}", "c-claimed", 3)
            target_cancel_after_claim.add(claimed.id)
            sentinel = await asyncio.to_thread(store.submit, lab.url("c-sentinel"), b"{}", "c-sentinel", 3)
            got = await worker.cancel(pending.id)  # layer 1: before any claim
            assert got.state is State.CANCELED, t(f"取消待领取任务后状态为 {got.state.value}",
                                                  f"after canceling a pending task its state is {got.state.value}")
            async with running(worker):
                await until(lambda: _final(store, sentinel.id), BOUND, "the sentinel task to finish")
            return pending.id, claimed.id, sentinel.id
        finally:
            await down.aclose()

    try:
        with capture() as records:
            p_id, k_id, s_id = asyncio.run(layers_1_2())
        p, k, s = store.get(p_id), store.get(k_id), store.get(s_id)
        p_calls, k_calls = lab.snapshot("c-pending")["calls"], lab.snapshot("c-claimed")["calls"]
        assert s.state is State.SUCCESS, t(f"哨兵任务应成功，实际 {s.state.value}", f"the sentinel should succeed, got {s.state.value}")
        assert p.state is State.CANCELED and p.attempt == 0 and p_calls == 0, t(
            f"待领取时取消：应 canceled、attempt 0、下游 0 次；实际 {p.state.value}、attempt {p.attempt}、{p_calls} 次",
            f"cancel while pending: expected canceled, attempt 0, 0 calls; got {p.state.value}, attempt {p.attempt}, "
            f"{p_calls} calls")
        c.note(t("第 1 层（待领取）：canceled，从未被领取，下游 0 次", "layer 1 (pending): canceled, never claimed, 0 calls"))
        assert k.state is State.CANCELED and k_calls == 0, t(
            f"领取后、调用前取消：应 canceled 且下游 0 次；实际 {k.state.value}、{k_calls} 次——"
            "_run_one 开始时要重新读取状态，发现 canceled 就不再调用",
            f"cancel after claim, before the call: expected canceled with 0 calls; got {k.state.value} with "
            f"{k_calls} calls — re-read the state at the start of the run and skip a canceled task")
        assert k.result is None, t("被取消的任务写入了结果", "a result was written for the canceled task")
        skipped = [r["event"] for r in _events(records, k_id)]
        c.note(t(f"第 2 层（已领取、未调用）：attempt {k.attempt}，下游 0 次，日志 {skipped}",
                 f"layer 2 (claimed, not called yet): attempt {k.attempt}, 0 calls, log {skipped}"))
    finally:
        store.close()

    # Layer 3, async client: the server must see the connection close and never answer.
    store = Store.open(_db("cancel-inflight.db"))

    async def in_flight(kind: str):
        name = f"hold-{kind}"
        url = lab.script(name, ["hold"])
        down = HttpxDownstream() if kind == "async" else ThreadDownstream(max_threads=2)
        try:
            # The call timeout outlasts the hold: the held request ends only by the client hanging up
            # (cancel reached the socket) or by the server answering at its cap (cancel did not).
            worker = _fast_worker(tc, store, down, call_timeout=CALL_TIMEOUT)
            task = await asyncio.to_thread(store.submit, url, b"{}", f"cancel-{kind}", 3)
            async with running(worker):
                await until(lambda: lab.snapshot(name)["active"] == 1, BOUND,
                            t("下游收到请求", "the downstream to get the call"))
                started = time.monotonic()
                got = await worker.cancel(task.id)
                cancel_s = time.monotonic() - started
                if kind == "async":
                    await until(lambda: lab.snapshot(name)["outcomes"], HOLD_CAP + BOUND,
                                t("服务器上的请求结束", "the request on the server to end"))
                    discarded = None
                else:
                    still = lab.snapshot(name)
                    lab.release(name)  # let the blocking request finish: nothing could stop it
                    await until(lambda: down.discarded >= 1, BOUND, t("线程里的请求结束并被丢弃",
                                                                      "the threaded request to end and be discarded"))
                    discarded = (still, down.discarded)
            return task.id, got, cancel_s, discarded
        finally:
            lab.release(name)
            await down.aclose()

    try:
        with capture() as records:
            tid, got, cancel_s, _ = asyncio.run(in_flight("async"))
        snap = lab.snapshot("hold-async")
        task = store.get(tid)
        assert got.state is State.CANCELED, t(f"cancel 返回 {got.state.value}", f"cancel returned {got.state.value}")
        assert snap["outcomes"] == ["client_closed"], t(
            f"异步下游：服务器应看到连接被关闭且从未应答，实际 {snap['outcomes']}——cancel 返回后请求仍在服务器上，"
            f"直到服务器在 {HOLD_CAP:g} 秒上限时自己应答。只改表里的状态不会打断 in-flight 请求，要取消正在 await 下游的 asyncio 任务",
            f"async downstream: the server should see the connection closed and never answer, got {snap['outcomes']} "
            f"— the request stayed on the server after cancel returned, until the server answered at its "
            f"{HOLD_CAP:g} s cap. Changing the row does not stop an in-flight request; cancel the asyncio task that "
            "awaits the downstream")
        assert task.state is State.CANCELED and task.result is None, t(
            f"取消后记录为 {task.state.value}、result={task.result!r}，应为 canceled 且无结果",
            f"after cancel the row is {task.state.value} with result={task.result!r}; expected canceled, no result")
        events = [r["event"] for r in _events(records, tid)]
        assert "task_interrupted" in events, t(f"日志里没有 task_interrupted：{events}", f"no task_interrupted in the log: {events}")
        c.note(t(f"第 3 层 httpx2.AsyncClient：cancel 用 {cancel_s * 1000:.0f} ms 返回，服务器看到 {snap['outcomes']}，"
                 f"记录 canceled、result=None，日志 {events}",
                 f"layer 3 httpx2.AsyncClient: cancel returned in {cancel_s * 1000:.0f} ms, the server saw "
                 f"{snap['outcomes']}, row canceled with result=None, log {events}"))

        with capture() as records:
            tid, got, cancel_s, (still, discarded) = asyncio.run(in_flight("thread"))
        snap = lab.snapshot("hold-thread")
        task = store.get(tid)
        assert got.state is State.CANCELED, t(f"cancel 返回 {got.state.value}", f"cancel returned {got.state.value}")
        assert still["active"] == 1 and not still["outcomes"], t(
            f"线程下游：cancel 返回时请求应仍在服务器上进行（线程无法被打断），实际 {still}",
            f"thread downstream: when cancel returned the request should still be running on the server "
            f"(a thread cannot be interrupted), got {still}")
        assert snap["outcomes"] == ["answered 200"], t(f"放行后服务器应应答 200，实际 {snap['outcomes']}",
                                                        f"after the release the server should answer 200, got {snap['outcomes']}")
        assert task.state is State.CANCELED and task.result is None, t(
            f"线程请求完成后记录为 {task.state.value}、result={task.result!r}：迟到的结果必须被丢弃",
            f"after the threaded request completed the row is {task.state.value} with result={task.result!r}: "
            "the late result must be discarded")
        c.note(t(f"第 3 层线程里的阻塞客户端：cancel 用 {cancel_s * 1000:.0f} ms 返回时请求仍在进行；放行后服务器 "
                 f"{snap['outcomes']}，结果被丢弃 {discarded} 次，记录仍 canceled、result=None",
                 f"layer 3 blocking client in a thread: cancel returned in {cancel_s * 1000:.0f} ms with the request "
                 f"still running; released, the server {snap['outcomes']}, the result was discarded {discarded}x, "
                 "row still canceled with result=None"))
    finally:
        store.close()


# ---------------------------------------------------------------- 07.8

def _serve(db: Path, port: int, stale_after: float, log_name: str) -> Process:
    log_path = LOGS / log_name
    log_path.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = Process([sys.executable, "-m", "taskcenter.main", "serve", "--db", str(db), "--port", str(port),
                    "--call-timeout", str(HOLD_CAP), "--stale-after", str(stale_after), "--poll-interval", "0.02",
                    "--stop-grace", "0.5"], cwd=WORK, log_path=log_path, env=env)
    try:
        proc.wait_ready(BOUND, port=port)  # uvicorn binds after the lifespan startup: recovery is done
    except BaseException:
        proc.stop()
        raise
    return proc


def _row(db: Path, tid: str) -> dict:
    conn = sqlite3.connect(str(db), timeout=5)
    try:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT state, attempt FROM tasks WHERE id = ?", (tid,)).fetchone()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return {"state": row["state"], "attempt": row["attempt"], "journal_mode": mode} if row else {}
    finally:
        conn.close()


def check_crash_recovery(c, lab: Loopback) -> None:
    _tc()
    import httpx2

    db = _db("crash.db")
    url = lab.script("crash", ["hold"])  # the first call hangs; later calls answer 200 at once
    started: list[Process] = []

    def get(port, tid):
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
            return client.get(f"/tasks/{tid}").json()

    try:
        port = free_port()
        first = _serve(db, port, 600, "crash-1.log")
        started.append(first)
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
            reply = client.post("/tasks", json={"url": url, "payload": {"order": 7}, "idempotency_key": "crash-1"})
        # (202 itself is 07.10's business; here any success with an id will do)
        assert reply.is_success and "id" in reply.json(), t(
            f"POST /tasks 失败：{reply.status_code} {reply.text[:200]}",
            f"POST /tasks failed: {reply.status_code} {reply.text[:200]}")
        tid = reply.json()["id"]
        wait_until(lambda: lab.snapshot("crash")["active"] == 1 and get(port, tid)["state"] == "running", BOUND,
                   "the task to be running with its call in flight")
        first.kill()  # SIGKILL: no shutdown, no finally
        row = _row(db, tid)
        c.note(t(f"pid {first.pid} 在调用进行中被 SIGKILL；库里：{row}", f"pid {first.pid} got SIGKILL mid-call; on disk: {row}"))
        assert row.get("state") == "running" and row.get("journal_mode") == "wal", t(
            f"崩溃后库里应留下一条 running（WAL 模式），实际 {row}",
            f"after the crash the file should hold a running row (WAL mode), got {row}")
        wait_until(lambda: lab.snapshot("crash")["outcomes"], HOLD_CAP + BOUND, "the server to notice the dead client")

        port = free_port()
        second = _serve(db, port, 600, "crash-2.log")
        started.append(second)
        young = get(port, tid)
        second.stop()
        assert young["state"] == "running", t(
            f"以默认阈值（600 秒）重启后，刚开始的 running 任务不应被回收，实际 {young['state']}",
            f"restarted with the default threshold (600 s), a task that just started must not be recovered; "
            f"got {young['state']}")
        c.note(t("默认阈值 600 秒重启：任务仍是 running（它可能还活着，不能抢）",
                 "restart with the default 600 s threshold: still running (it might be alive, not ours to take)"))

        port = free_port()
        third = _serve(db, port, 0, "crash-3.log")
        started.append(third)
        right_after = get(port, tid)  # recovery ran in the startup, before the port opened
        assert (right_after["state"], right_after["attempt"]) != ("running", 1), t(
            "以 --stale-after 0 重启后任务仍是第 1 次尝试的 running：启动时没有调用 recover_stale_running，"
            "或它没有把过期任务改回 pending",
            "after a restart with --stale-after 0 the task is still running its first attempt: startup did not "
            "call recover_stale_running, or it did not move the stale task back to pending")
        final = wait_until(lambda: (lambda r: r if r["state"] in ("success", "failed", "canceled") else None)(
            get(port, tid)), BOUND, "the recovered task to finish")
        recovered = [line for line in third.log_text().splitlines() if '"task_recovered"' in line and tid in line]
        for line in recovered:
            c.note(line)
        assert not recovered or '"pending"' in recovered[0], t(
            f"过期任务被恢复成了别的状态而不是 pending：{recovered[0] if recovered else ''}——崩溃时没做完的任务"
            "应回到队列重跑，而不是判失败",
            f"the stale task was recovered into something other than pending: {recovered[0] if recovered else ''} "
            "— work a crash interrupted goes back to the queue, it is not a failure")
        assert recovered, t(
            f"以 --stale-after 0 重启后日志里没有该任务回到 pending 的 task_recovered 行：\n{third.log_tail(8)}",
            f"after a restart with --stale-after 0 the log has no task_recovered line moving it to pending:\n"
            f"{third.log_tail(8)}")
        calls = lab.snapshot("crash")["calls"]
        assert final["state"] == "success" and final["attempt"] == 2 and calls == 2, t(
            f"恢复后任务应在第 2 次尝试成功（下游共 2 次），实际 {final['state']}、attempt {final['attempt']}、"
            f"{calls} 次，error={final.get('error')!r}",
            f"after recovery the task should succeed at attempt 2 (2 downstream calls); got {final['state']}, "
            f"attempt {final['attempt']}, {calls} calls, error={final.get('error')!r}")
        keys = set(lab.keys["crash"])
        c.note(t(f"--stale-after 0 重启：running → pending → success，attempt {final['attempt']}，下游 {calls} 次，"
                 f"两次都带 Idempotency-Key {keys}", f"restart with --stale-after 0: running → pending → success, "
                 f"attempt {final['attempt']}, {calls} downstream calls, both with Idempotency-Key {keys}"))
    finally:
        lab.release("crash")
        for proc in started:
            proc.stop()


# ---------------------------------------------------------------- 07.9

def check_concurrency(c, lab: Loopback) -> None:
    tc = _tc()
    from taskcenter.downstream import HttpxDownstream
    from taskcenter.models import State
    from taskcenter.store import Store

    limit, count = 4, 24
    store = Store.open(_db("concurrency.db"))
    # The first N calls meet at a barrier in the server: it opens only while N calls are in flight at
    # once, which proves the worker really runs N side by side.  The rest take 50 ms each.
    lab.gather("slow", limit)
    url = lab.script("slow", ["gather"] * limit + [0.05] * (count - limit))
    ids = [store.submit(url, b"{}", f"conc-{i}", 3).id for i in range(count)]

    class Counting:
        """Counts calls in flight on the worker's side of the port."""

        def __init__(self, inner):
            self.inner, self.now, self.peak = inner, 0, 0

        async def post(self, *args, **kwargs):
            self.now += 1
            self.peak = max(self.peak, self.now)
            try:
                return await self.inner.post(*args, **kwargs)
            finally:
                self.now -= 1

    async def run():
        inner = HttpxDownstream()
        down = Counting(inner)
        try:
            async with running(_fast_worker(tc, store, down, concurrency=limit)):
                await until(lambda: all(_final(store, tid) for tid in ids), HOLD_CAP + BOUND, "all tasks to finish")
                return down.peak
        finally:
            await inner.aclose()

    try:
        peak = asyncio.run(run())
        server = lab.snapshot("slow")
        gathered = lab.gathered["slow"]
        states = Counter(store.get(tid).state.value for tid in ids)
        c.note(t(f"N={limit}，{count} 个任务：前 {limit} 个调用在服务器的屏障处会合（{gathered} 个通过），"
                 f"端口内计数最多 {peak} 个同时进行（服务器最多看到 {server['peak']} 个），终态 {dict(states)}",
                 f"N={limit}, {count} tasks: the first {limit} calls met at the server's barrier ({gathered} passed), "
                 f"the port-side counter saw at most {peak} at once (the server at most {server['peak']}), final "
                 f"states {dict(states)}"))
        # The bound is judged on the worker's side of the port: the server may still count a request
        # whose client already gave up while its retry begins.
        assert peak <= limit, t(
            f"同时进行的下游调用达到 {peak}，超过上限 N={limit}：Semaphore 要在领取前取得名额，在任务结束时归还",
            f"{peak} downstream calls ran at once, above N={limit}: take a Semaphore slot before "
            "claiming and give it back when the task ends")
        assert states == {State.SUCCESS.value: count}, t(f"应全部成功，实际 {dict(states)}",
                                                         f"all should succeed, got {dict(states)}")
        assert gathered == limit, t(
            f"服务器从未同时收到 {limit} 个调用（屏障没有打开）：工作者没有让 N 个调用并行进行",
            f"the server never had {limit} calls in at once (its barrier never opened): the worker does not run "
            "N calls side by side")
    finally:
        store.close()


# ---------------------------------------------------------------- 07.10

def check_http(c) -> None:
    _tc()
    from starlette.testclient import TestClient
    from taskcenter.api import create_app
    from taskcenter.downstream import DownResponse, FakeDownstream

    db = _db("api.db")

    def rows() -> int:
        conn = sqlite3.connect(str(db), timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
        finally:
            conn.close()

    app = create_app(db, FakeDownstream(default=DownResponse(200, b'{"ok": true}')), poll_interval=0.01)
    good = {"url": "http://127.0.0.1:9/work", "payload": {"n": 1}, "idempotency_key": "http-1", "max_attempts": 3}
    with TestClient(app, raise_server_exceptions=False) as client:
        reply = client.post("/tasks", json=good)
        assert reply.status_code == 202, t(f"POST /tasks 应返回 202，实际 {reply.status_code} {reply.text[:200]}",
                                           f"POST /tasks should answer 202, got {reply.status_code} {reply.text[:200]}")
        tid = reply.json().get("id")
        location = reply.headers.get("location")
        assert tid and location == f"/tasks/{tid}", t(f"Location 应为 /tasks/{tid}，实际 {location!r}",
                                                      f"Location should be /tasks/{tid}, got {location!r}")
        c.note(f"POST /tasks → 202, Location {location}")
        final = wait_until(lambda: (lambda b: b if b.get("state") == "success" else None)(client.get(location).json()),
                           BOUND, "the task to succeed")
        c.note(f"GET {location} → 200 state={final['state']} attempt={final['attempt']} result={final['result']!r}")
        for path, method in ((f"/tasks/{'0' * 32}", "get"), (f"/tasks/{'0' * 32}/cancel", "post")):
            missing = getattr(client, method)(path)
            assert missing.status_code == 404, t(f"{method.upper()} {path} 应返回 404，实际 {missing.status_code}",
                                                 f"{method.upper()} {path} should answer 404, got {missing.status_code}")
        c.note(t("未知 id：GET 与 cancel 都返回 404", "unknown id: GET and cancel both answer 404"))

        before = rows()
        bad_cases = [
            (t("缺少 url", "missing url"), {"json": {"payload": {}, "idempotency_key": "bad-1"}}, "url"),
            (t("url 不是 URL", "url not a URL"), {"json": {**good, "url": "not a url", "idempotency_key": "bad-2"}}, "url"),
            ("ftp url", {"json": {**good, "url": "ftp://127.0.0.1/x", "idempotency_key": "bad-3"}}, "url"),
            (t("请求体不是 JSON", "non-JSON body"), {"content": b'{"url": "http://127.0.0.1:9/work", ',
                               "headers": {"content-type": "application/json"}}, "json"),
            ("max_attempts=0", {"json": {**good, "max_attempts": 0, "idempotency_key": "bad-4"}}, "max_attempts"),
            ("max_attempts=11", {"json": {**good, "max_attempts": 11, "idempotency_key": "bad-5"}}, "max_attempts"),
        ]
        for label, kwargs, word in bad_cases:
            bad = client.post("/tasks", **kwargs)
            text = bad.text
            assert bad.status_code == 422, t(f"{label}：应返回 422，实际 {bad.status_code} {text[:200]}",
                                             f"{label}: expected 422, got {bad.status_code} {text[:200]}")
            assert word.lower() in text.lower(), t(f"{label}：422 的说明没有提到 {word}：{text[:200]}",
                                                   f"{label}: the 422 message does not mention {word}: {text[:200]}")
            now = rows()
            assert now == before, t(f"{label}：被拒绝的请求仍写入了 {now - before} 行", f"{label}: a rejected request stored {now - before} row(s)")
            message = bad.json().get("message") if isinstance(bad.json(), dict) else None
            c.note(f"{label} → 422 {message or text[:120]}")
        c.note(t(f"6 个坏请求之后表里仍是 {rows()} 行", f"after 6 bad requests the table still holds {rows()} row(s)"))


# ---------------------------------------------------------------- main

def not_taken_up(tap) -> None:
    """The task center is the kit's own design study beside the curriculum: a learner's folder without it has
    not taken up this extension (the reference always has it).  Every check says so, selected or not."""
    for row in checks():
        with tap.check(row.id) as c:
            c.skip(t("扩展未做：文件夹里没有 taskcenter/ 包（参考实现见本课 taskcenter/）",
                     "extension not taken up: no taskcenter/ package in the folder (see the lesson's reference)"))


if __name__ == "__main__":
    if not TASKCENTER.exists():
        main_guard(not_taken_up)
    LAB = Loopback()
    run(checks(), teardown=LAB.stop)
