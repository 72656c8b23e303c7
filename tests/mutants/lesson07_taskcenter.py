"""Lesson 07 mutants for the durable task center (taskcenter/, checks 07.5-07.10).

Each one is a mistake people really make when they build a task queue on SQLite and asyncio.
"""

from tests.mutants import Mutant

WORKER = "taskcenter/worker.py"
STORE = "taskcenter/store.py"

MUTANTS = [
    # ---- 07.5: state machine and idempotency
    Mutant(
        name="07-tc-key-not-unique",
        file=STORE,
        old="    idempotency_key  TEXT NOT NULL UNIQUE,\n",
        new="    idempotency_key  TEXT NOT NULL,\n",
        fails=("07.5",),
        why="Without the UNIQUE constraint nothing stops a second INSERT: a repeated (or concurrent) "
            "submit creates a second task and the downstream is called twice.",
    ),
    Mutant(
        name="07-tc-key-reruns-after-terminal",
        file=STORE,
        old="            if existing.terminal:\n                raise IdempotencyConflict(existing) from None\n",
        new="",
        fails=("07.5",),
        why="A finished key is silently answered with the old task instead of being refused, so a "
            "client cannot tell \"accepted\" from \"this already ran\".",
    ),
    Mutant(
        name="07-tc-success-reopens",
        file="taskcenter/models.py",
        old="    State.SUCCESS: frozenset(),\n",
        new="    State.SUCCESS: frozenset({State.PENDING}),\n",
        fails=("07.5",),
        why="Letting success go back to pending (\"so it can be re-run\") makes a terminal state "
            "mutable: the same work can run twice.",
    ),
    # ---- 07.6: retries
    Mutant(
        name="07-tc-retry-4xx",
        file="taskcenter/retry.py",
        old="        retryable = 500 <= status <= 599\n",
        new="        retryable = status >= 400\n",
        fails=("07.6",),
        why="Retrying a 400 repeats a request that is wrong by construction and loads the downstream.",
    ),
    Mutant(
        name="07-tc-attempts-off-by-one",
        file="taskcenter/retry.py",
        old="    if attempt >= max_attempts:\n",
        new="    if attempt > max_attempts:\n",
        fails=("07.6",),
        why="Not counting the first call: max_attempts=3 makes 4 calls.",
    ),
    Mutant(
        name="07-tc-timeout-not-retried",
        file="taskcenter/retry.py",
        old="        retryable = isinstance(exc, (TimeoutError, ConnectionError))\n",
        new="        retryable = isinstance(exc, ConnectionError)\n",
        fails=("07.6",),
        why="A timeout is the most common transient failure; failing it at once loses work a retry would save.",
    ),
    Mutant(
        name="07-tc-backoff-no-jitter",
        file="taskcenter/retry.py",
        old="        return ceiling / 2 + rand() * ceiling / 2\n",
        new="        return ceiling\n",
        fails=("07.6",),
        why="Without jitter every task that failed together wakes up together (a thundering herd).",
    ),
    # ---- 07.7: cancel at three layers
    Mutant(
        name="07-tc-no-recheck-after-claim",
        file=WORKER,
        old="        current = await self._db(self._store.get, task.id)\n",
        new="        current = task  # the claimed copy is fresh enough\n",
        fails=("07.7",),
        why="Trusting the claimed copy misses a cancel that arrived between claim and call: the "
            "downstream is called for a canceled task.",
    ),
    Mutant(
        name="07-tc-cancel-only-in-table",
        slow=True,  # the server answers only at its 20 s cap
        file=WORKER,
        old="            job.cancel()  # CancelledError at the await inside the downstream call\n",
        new="            pass  # the state in the table is enough\n",
        fails=("07.7",),
        why="Marking canceled without cancelling the asyncio task leaves the in-flight request "
            "running: the cancel stops nothing (a flag nobody reads during the call).",
    ),
    # ---- 07.8: crash recovery
    Mutant(
        name="07-tc-recover-as-failed",
        file=STORE,
        old="            dst, error, finished = State.PENDING, reason, None\n",
        new="            dst, error, finished = State.FAILED, reason, now\n",
        fails=("07.8",),
        why="Treating a crash-orphaned task as failed throws away work that was never finished.",
    ),
    Mutant(
        name="07-tc-no-recovery-at-start",
        file=WORKER,
        old="            recovered = await self._db(self._store.recover_stale_running, self._stale_after_s)\n",
        new="            recovered = {}  # nothing to recover, we just started\n",
        fails=("07.8",),
        why="Without recovery at start a task running at the crash stays \"running\" forever.",
    ),
    Mutant(
        name="07-tc-recover-ignores-threshold",
        file=STORE,
        old="                (State.RUNNING.value, now - older_than_s),\n",
        new="                (State.RUNNING.value, now),\n",
        fails=("07.8",),
        why="Recovering every running row regardless of age would steal a task another live "
            "process is still running: the default threshold must leave a young task alone.",
    ),
    # ---- 07.9: concurrency limit
    Mutant(
        name="07-tc-no-slot-before-claim",
        file=WORKER,
        old="                await self._slots.acquire()  # a free slot first: never claim what we cannot run now\n",
        new="                pass  # asyncio is cheap, no need to wait for a slot\n",
        fails=("07.9",),
        why="Spawning a job per claim without taking a slot lets every pending task hit the "
            "downstream at once.",
    ),
    Mutant(
        name="07-tc-run-inline",
        slow=True,  # the server's barrier runs out its bound
        file=WORKER,
        old=('                self._inflight[task.id] = asyncio.create_task(self._guarded(task), '
             'name=f"task-{task.id}")\n'),
        new="                await self._guarded(task)  # one at a time is simpler to reason about\n",
        fails=("07.9",),
        why="Awaiting each job in the claim loop runs the calls one after another: the Semaphore allows N, "
            "but N calls are never in flight together (the server's barrier for N never opens).",
    ),
    # ---- 07.10: HTTP surface
    Mutant(
        name="07-tc-attempts-unbounded",
        file="taskcenter/api.py",
        old="    max_attempts: int = Field(default=3, ge=1, le=10)\n",
        new="    max_attempts: int = 3\n",
        fails=("07.10",),
        why="Without bounds max_attempts=0 or 11 reaches the store: a 500 or a stored task that retries too much.",
    ),
    Mutant(
        name="07-tc-url-any-string",
        file="taskcenter/api.py",
        old="    url: HttpUrl                                        # http(s) only, with a host\n",
        new="    url: str\n",
        fails=("07.10",),
        why="A plain str accepts \"not a url\" and ftp://: the bad task is stored and only fails later in the worker.",
    ),
    Mutant(
        name="07-tc-submit-200",
        file="taskcenter/api.py",
        old='    @app.post("/tasks", status_code=202)\n',
        new='    @app.post("/tasks")\n',
        fails=("07.10",),
        why="200 tells the caller the work is done; it has only been accepted.",
    ),
]
