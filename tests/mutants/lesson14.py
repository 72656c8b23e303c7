"""Lesson 14 mutants: plausible mistakes with durable time slots, the beat signal and the slot name."""

from tests.mutants import Mutant

GATE = """        # 1. The gate first: whoever holds it is the only one checking and inserting right now.
        lock_admission(cur)
"""

SLOT_CHECK = """        # 2. The slot check, under the gate.  FOR UPDATE reads the latest committed row.
        cur.execute("SELECT job_id FROM export_schedule_slots WHERE slot_key=%s FOR UPDATE", (slot_key,))
        if cur.fetchone() is not None:
            return None  # nothing written in this transaction: leaving the with-block just commits nothing
"""

ADMIT_AND_JOB = """        # 3. A new slot needs a place.  admit_export locks the gate again: same transaction, no-op.
        admit_export(cur)
        rows = read_snapshot(cur, product_ids)  # bad product ids raise here: still nothing written
        # 4. job → slot → outbox, all in this transaction.
        cur.execute(
            "INSERT INTO export_jobs (id, payload, deadline_at) "
            "VALUES (%s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (job_id, json.dumps(rows, ensure_ascii=False), DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the scheduled job insert did not create exactly one row")
"""

JOB = ADMIT_AND_JOB[ADMIT_AND_JOB.index("        rows = read_snapshot"):]  # the snapshot and the job INSERT

BACKSTOP = """        # The primary key is the backstop: if a caller skipped the gate, this raises and rolls back.
"""

SLOT_INSERT = ('        cur.execute("INSERT INTO export_schedule_slots (slot_key, job_id) VALUES (%s, %s)", '
               '(slot_key, job_id))\n')

MUTANTS = [
    # ---- 14.1: one slot, one job — the job must not be written before the slot is known to be new
    Mutant(
        name="14-job-before-slot-check",
        file="schedule_store.py",
        old=SLOT_CHECK + ADMIT_AND_JOB,
        new=JOB + SLOT_CHECK + "        admit_export(cur)\n",
        fails=("14.1",),
        why="'The foreign key needs the job first', so the job is inserted before the slot is looked up: a repeat "
            "returns None but its job commits anyway — an orphan job with no slot and no event.",
    ),
    Mutant(
        name="14-commit-after-duplicate-key",
        file="schedule_store.py",
        old=SLOT_CHECK + ADMIT_AND_JOB + BACKSTOP + SLOT_INSERT,
        new=ADMIT_AND_JOB + """        try:
            cur.execute("INSERT INTO export_schedule_slots (slot_key, job_id) VALUES (%s, %s)", (slot_key, job_id))
        except Exception as exc:
            if exc.args and exc.args[0] == 1062:  # duplicate key: "it is already scheduled"
                return None
            raise
""",
        fails=("14.1", "14.7"),
        why="The slot check is left to the primary key and the duplicate-key error is caught: the with-block then "
            "commits the job inserted a moment earlier (an orphan), and with the gate full a repeat for an existing "
            "slot is reported as over capacity.",
    ),
    # ---- 14.2: beat sends, the worker must know the task
    Mutant(
        name="14-tick-module-not-included",
        file="celery_app.py",
        old='include=["export_tasks", "retry_tasks", "schedule_tasks"]',
        new='include=["export_tasks", "retry_tasks"]',
        fails=("14.2",),
        why="schedule_tasks is missing from include: beat sends products.schedule_tick, the worker rejects it as "
            "an unregistered task and no slot, job or file ever appears.",
    ),
    Mutant(
        name="14-scheduled-export-on-fast-queue",
        file="schedule_store.py",
        old="            (str(uuid4()), job_id, SCHEDULED_QUEUE),\n",
        new='            (str(uuid4()), job_id, "exports.fast"),  # "the tick came in on fast, keep it there"\n',
        fails=("14.2",),
        why="The scheduled export is announced on the fast queue: a long snapshot competes with the short "
            "exports the fast workers are kept free for.",
    ),
    # ---- 14.3: the slot is named in UTC
    Mutant(
        name="14-slot-from-wall-clock",
        file="schedule_tasks.py",
        old="    return when.astimezone(timezone.utc).strftime(SLOT_FORMAT)\n",
        new="    return when.strftime(SLOT_FORMAT)\n",
        fails=("14.3",),
        why="The slot is formatted from the datetime's own wall clock: 18:00+08:00 and 10:00Z, one instant, get "
            "two slot names.",
    ),
    # ---- 14.4: stopped minutes are not caught up
    Mutant(
        name="14-backfill-missed-minutes",
        file="schedule_tasks.py",
        old="""    try:
        return schedule_once(slot, ids)
""",
        new="""    try:
        job_id = schedule_once(slot, ids)
        # "catch up": also the five minutes before, in case beat was down for a while
        from datetime import timedelta
        now = datetime.now(timezone.utc)
        for back in range(1, 6):
            schedule_once(execution_slot(now - timedelta(minutes=back)), ids)
        return job_id
""",
        fails=("14.4",),
        why="A catch-up loop fills the minutes before each tick: minutes during which beat was stopped get slots "
            "and jobs as if they had run.",
    ),
    # ---- 14.5: one slot per execution minute
    Mutant(
        name="14-slot-per-hour",
        file="schedule_tasks.py",
        old='SLOT_FORMAT = "shop-export:%Y%m%dT%H%M"',
        new='SLOT_FORMAT = "shop-export:%Y%m%dT%H"',
        fails=("14.5",),
        says=(("14.5", "the slot name must carry the minute"),),
        why="The minute is missing from the slot format: 10:00:59 and 10:01:01 share one slot, so the "
            "cross-minute redelivery the lesson documents never shows up.",
    ),
    # ---- 14.6: bad slot keys are refused before any write
    Mutant(
        name="14-no-ascii-check",
        file="schedule_store.py",
        old="    if not slot_key.isascii() or not 1 <= len(slot_key) <= SLOT_KEY_MAX:\n",
        new="    if not 1 <= len(slot_key) <= SLOT_KEY_MAX:\n",
        fails=("14.6",),
        why="Non-ASCII keys are left for the ascii column to refuse: the caller gets a database error from the "
            "middle of the transaction instead of a clear ValueError up front.",
    ),
    # ---- 14.7: an existing slot is answered before the capacity check
    Mutant(
        name="14-admit-before-slot-check",
        file="schedule_store.py",
        old=GATE,
        new="""        # 1. The gate and the capacity check first.
        admit_export(cur)
""",
        fails=("14.7",),
        why="admit_export runs before the slot check: with the gate full, a repeated signal for a slot that "
            "already has its job is reported as over capacity.",
    ),
    # ---- 14.8 (exercise): the slot check must happen under the gate
    Mutant(
        name="14-slot-check-without-gate",
        file="schedule_store.py",
        old=GATE,
        new="",
        fails=("14.8",),
        why="The slot is looked up before the gate is taken (admit_export locks it only later): concurrent callers "
            "all find no slot, then queue at the gate and hit the primary key one after another.",
    ),
]
