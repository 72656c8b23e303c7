"""The worker: one asyncio loop that claims tasks and runs at most N downstream calls at once.

    run_forever()   recover stale tasks, then: take a slot -> claim -> start a job, repeat
    cancel(id)      stop a task wherever it is: pending, claimed, or in the middle of its call
    stop()          graceful: no new claims, let calls finish for a grace period, give back the rest

SQLite calls are blocking, so they go through Store.call (the store's own thread) and
the loop stays free for the calls in flight.
The Semaphore limits calls in flight, not tasks queued: the queue is the table.
"""

from __future__ import annotations

import asyncio
import time

from .downstream import Downstream
from .log import log
from .models import IllegalTransition, State, Task
from .retry import Backoff, classify
from .store import Store


def _ms(since: float) -> int:
    return int((time.perf_counter() - since) * 1000)


class Worker:
    def __init__(self, store: Store, down: Downstream, *, concurrency: int = 8, poll_interval: float = 0.05,
                 call_timeout: float = 5.0, stale_after_s: float = 600.0, backoff: Backoff = Backoff(),
                 stop_grace_s: float = 5.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        # A running task younger than stale_after_s may still be alive: keep the threshold
        # above the longest call (call_timeout) or recovery would start a second copy.
        self._store = store
        self._down = down
        self._slots = asyncio.Semaphore(concurrency)
        self._poll = poll_interval
        self._call_timeout = call_timeout
        self._stale_after_s = stale_after_s
        self._backoff = backoff
        self._stop_grace_s = stop_grace_s
        self._inflight: dict[str, asyncio.Task[None]] = {}  # task id -> the job running it
        self._wake = asyncio.Event()       # set by notify(): a new task may be waiting
        self._stopping = asyncio.Event()
        self._loop_done = asyncio.Event()
        self._loop_started = False

    @property
    def inflight(self) -> list[str]:
        return list(self._inflight)

    def notify(self) -> None:
        """Tell an idle loop to look at the table now instead of after the poll interval."""
        self._wake.set()

    async def _db(self, method, *args, **kwargs):
        return await self._store.call(method, *args, **kwargs)

    # ------------------------------------------------------------------ the loop

    async def run_forever(self) -> None:
        self._loop_started = True
        try:
            recovered = await self._db(self._store.recover_stale_running, self._stale_after_s)
            for tid, state in recovered.items():
                log("task_recovered", task_id=tid, state=state, reason="stale running after a crash")
            while True:
                await self._slots.acquire()  # a free slot first: never claim what we cannot run now
                if self._stopping.is_set():
                    self._slots.release()
                    break
                self._wake.clear()  # before the claim, so a submit during the claim still wakes us
                try:
                    task = await self._db(self._store.claim_one)
                except Exception as exc:  # e.g. the database is locked for too long: log, wait, go on
                    self._slots.release()
                    log("claim_failed", error=f"{type(exc).__name__}: {exc}")
                    await self._idle()
                    continue
                if task is None:
                    self._slots.release()
                    await self._idle()
                    continue
                if self._stopping.is_set():  # stop() came while we were claiming: give it back
                    await self._db(self._store.requeue, task.id, "worker stopping")
                    self._slots.release()
                    break
                self._inflight[task.id] = asyncio.create_task(self._guarded(task), name=f"task-{task.id}")
        finally:
            self._loop_done.set()

    async def _idle(self) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=self._poll)
        except TimeoutError:
            pass

    async def _guarded(self, task: Task) -> None:
        try:
            await self._run_one(task)
        except Exception as exc:  # a bug must show up in the log, not vanish with the job
            error = f"internal error: {type(exc).__name__}: {exc}"
            log("task_crashed", task_id=task.id, state=State.FAILED, attempt=task.attempt, duration_ms=0, error=error)
            try:  # fail it rather than leave it "running" until the next restart
                await self._db(self._store.mark, task.id, State.FAILED, error=error)
            except Exception:
                pass  # canceled meanwhile, or the database itself is the problem: recovery will see it
        finally:
            self._inflight.pop(task.id, None)
            self._slots.release()

    # ------------------------------------------------------------------ one attempt

    async def _run_one(self, task: Task) -> None:
        started = time.perf_counter()
        # Cancel layer 2: a cancel may have landed between the claim and now.
        current = await self._db(self._store.get, task.id)
        if current.state is not State.RUNNING:
            log("task_skipped", task_id=task.id, state=current.state, attempt=task.attempt, duration_ms=0,
                reason="canceled after claim, before the call")
            return
        log("task_start", task_id=task.id, state=State.RUNNING, attempt=task.attempt, duration_ms=0, url=task.url)

        status: int | None = None
        body: bytes | None = None
        error: Exception | None = None
        try:
            # The downstream gets the timeout; the outer one is a backstop for an adapter that ignores it.
            async with asyncio.timeout(self._call_timeout + 1.0):
                response = await self._down.post(task.url, task.body, timeout=self._call_timeout,
                                                 idempotency_key=task.idempotency_key)
            status, body = response.status, response.body
        except asyncio.CancelledError:
            # Cancel layer 3 (or a stop): leave at once; whoever cancelled us owns the state change.
            log("task_interrupted", task_id=task.id, state=State.RUNNING, attempt=task.attempt,
                duration_ms=_ms(started))
            raise
        except Exception as exc:
            error = exc
        duration_ms = _ms(started)

        if status is not None and 200 <= status <= 299:
            await self._settle(task, State.SUCCESS, duration_ms, result=body, http_status=status)
            return
        plan = classify(status, error, task.attempt, task.max_attempts, self._backoff)
        detail = {"http_status": status} if error is None else {"error": f"{type(error).__name__}: {error}"}
        if plan.retry:
            await self._settle(task, State.PENDING, duration_ms, stored_error=plan.reason,
                               not_before=time.time() + plan.delay_s, reason=plan.reason,
                               delay_s=round(plan.delay_s, 3), **detail)
        else:
            await self._settle(task, State.FAILED, duration_ms, stored_error=plan.reason, reason=plan.reason,
                               **detail)

    async def _settle(self, task: Task, dst: State, duration_ms: int, *, result: bytes | None = None,
                      stored_error: str | None = None, not_before: float | None = None, **fields) -> None:
        """Write the outcome (fields only go to the log line).  The store refuses it if the task was
        canceled meanwhile: then the outcome is dropped (a result must never overwrite a cancel)."""
        try:
            await self._db(self._store.mark, task.id, dst, result=result, error=stored_error,
                           not_before=not_before)
        except IllegalTransition as exc:
            log("task_result_discarded", task_id=task.id, state=exc.src, attempt=task.attempt,
                duration_ms=duration_ms, reason=f"task is already {exc.src.value}", **fields)
            return
        event = "task_retry" if dst is State.PENDING else "task_done"
        log(event, task_id=task.id, state=dst, attempt=task.attempt, duration_ms=duration_ms, **fields)

    # ------------------------------------------------------------------ cancel and stop

    async def cancel(self, tid: str, wait_s: float = 5.0) -> Task:
        """Cancel a task and return it as stored afterwards.  KeyError if the id is unknown.
        A task that already finished is returned unchanged."""
        task = await self._db(self._store.get, tid)
        if task.terminal:
            return task
        try:
            canceled = await self._db(self._store.mark, tid, State.CANCELED, error="canceled by request")
        except IllegalTransition:
            return await self._db(self._store.get, tid)  # it finished a moment before us
        job = self._inflight.get(tid)
        if job is not None:
            layer = "in flight: the call is interrupted"   # layer 3
            job.cancel()  # CancelledError at the await inside the downstream call
            await asyncio.wait({job}, timeout=wait_s)
        elif task.state is State.PENDING:
            layer = "pending: it will never be claimed"   # layer 1
        else:
            layer = "claimed, before the call"             # layer 2: _run_one re-reads and skips
        log("task_canceled", task_id=tid, state=State.CANCELED, attempt=canceled.attempt, duration_ms=0,
            reason=layer)
        return canceled

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop claiming, give running calls grace_s to finish, interrupt the rest and put them
        back in the table, then wait for the loop to end."""
        grace = self._stop_grace_s if grace_s is None else grace_s
        self._stopping.set()
        self._wake.set()
        jobs = dict(self._inflight)  # complete: no job starts once _stopping is set
        if jobs:
            await asyncio.wait(jobs.values(), timeout=grace)
        late = {tid: job for tid, job in jobs.items() if not job.done()}
        for job in late.values():
            job.cancel()
        if late:
            await asyncio.wait(late.values())
        for tid in late:
            state = await self._db(self._store.requeue, tid, "interrupted by worker stop")
            if state is not None:
                log("task_requeued", task_id=tid, state=state, reason="worker stopped mid-call")
        if self._loop_started:
            await self._loop_done.wait()
