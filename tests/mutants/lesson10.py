"""Lesson 10 mutants: plausible mistakes with retries, backoff and deadlines."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 10.1: recovers after two retries
    Mutant(
        name="10-attempt-stuck-at-zero",
        file="retry_tasks.py",
        old="        rows = fetch_snapshot(self.request.retries, fail_until)\n",
        new="        rows = fetch_snapshot(0, fail_until)\n",
        fails=("10.1",),
        why="Passing a constant attempt instead of self.request.retries: every retry repeats attempt 0, so "
            "fail_until=2 never recovers and runs out of retries.",
    ),
    Mutant(
        name="10-returns-the-rows",
        file="retry_tasks.py",
        old='    return {"job_id": job_id, "rows": len(rows)}\n',
        new='    return {"job_id": job_id, "rows": rows}\n',
        fails=("10.1",),
        why="The result carries the snapshot itself instead of the row count.",
    ),
    # ---- 10.2: an expired deadline fails before the read
    Mutant(
        name="10-deadline-checked-after-read",
        file="retry_tasks.py",
        old="""    remaining = deadline_epoch - time.time()
    if remaining <= 0:
        raise RuntimeError("export deadline exceeded")  # checked before the source is touched
    try:
        rows = fetch_snapshot(self.request.retries, fail_until)
""",
        new="""    try:
        rows = fetch_snapshot(self.request.retries, fail_until)
        if deadline_epoch - time.time() <= 0:
            raise RuntimeError("export deadline exceeded")
""",
        fails=("10.2",),
        why="Checking the deadline after the read still hits the source for a request nobody waits for.",
    ),
    # ---- 10.3: a permanent error runs once
    Mutant(
        name="10-retry-every-exception",
        file="retry_tasks.py",
        old="    except TemporaryReadError as exc:  # only this type is worth waiting for\n",
        new="    except Exception as exc:\n",
        fails=("10.3",),
        why="Retrying every exception turns a validation error into three more useless executions.",
    ),
    # ---- 10.4: 1 + 3 executions
    Mutant(
        name="10-retry-limit-off-by-one",
        file="retry_tasks.py",
        old="        if self.request.retries >= self.max_retries:\n",
        new="        if self.request.retries + 1 >= self.max_retries:\n",
        fails=("10.4",),
        why="Counting the first run as a retry: the task stops after 3 executions instead of 1 + 3.",
    ),
    # ---- 10.5: delays within [0, cap], deadline carried
    Mutant(
        name="10-jitter-on-top-of-cap",
        file="retry_tasks.py",
        old="        delay = random.uniform(0, cap)  # full jitter: failed tasks do not come back in step\n",
        new="        delay = cap + random.uniform(0, cap)  # backoff plus some jitter\n",
        fails=("10.5",),
        why="Adding the jitter on top of the backoff puts every wait above its cap.",
    ),
    Mutant(
        name="10-backoff-without-jitter",
        file="retry_tasks.py",
        old="        delay = random.uniform(0, cap)  # full jitter: failed tasks do not come back in step\n",
        new="        delay = cap  # plain exponential backoff\n",
        fails=("10.5",),
        why="Every failed task waits exactly its cap: tasks that failed together all come back together.",
    ),
    Mutant(
        name="10-deadline-reset-on-retry",
        file="retry_tasks.py",
        old="        raise self.retry(exc=exc, countdown=delay) from exc  # same args: the deadline travels along\n",
        new="        fresh = [job_id, time.time() + 30, fail_until]  # a new deadline for the retry\n"
            "        raise self.retry(exc=exc, countdown=delay, args=fresh) from exc\n",
        fails=("10.5",),
        why="Each retry gets a fresh 30 s deadline, so the total budget never runs out.",
    ),
    # ---- 10.6: exercise, the budget ends retries early
    Mutant(
        name="10-no-budget-check",
        file="retry_tasks.py",
        old="""        if time.time() + delay + 0.1 >= deadline_epoch:
            # Not enough time left for the wait plus a minimal attempt: stop now, retries left or not.
            raise RuntimeError("insufficient retry budget") from exc
""",
        new="",
        fails=("10.6",),
        why="Without the budget check a retry is scheduled that cannot finish in time.",
    ),
    Mutant(
        name="10-budget-from-stale-remaining",
        file="retry_tasks.py",
        old="        if time.time() + delay + 0.1 >= deadline_epoch:\n",
        new="        if delay + 0.1 >= remaining:  # remaining was measured on entry, before the read\n",
        fails=("10.6",),
        why="The budget measured before the read ignores the time the read took: a slow read leaves too little "
            "for the wait, yet a retry is scheduled.",
    ),
]
