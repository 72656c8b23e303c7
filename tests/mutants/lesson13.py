"""Lesson 13 mutants: plausible mistakes with the admission gate, the queue split and the backlog."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 13.1: the gate and what counts as "taking a place"
    Mutant(
        name="13-count-then-insert-without-gate",
        file="state_store.py",
        old="    lock_admission(cur)\n    # READ COMMITTED",
        new="    # READ COMMITTED",
        fails=("13.1", "13.6"),
        says=(("13.6", "both counted 4 and both inserted"),),
        why="Count, then insert, with no gate row locked: concurrent submits all read the same count and all "
            "insert, so the last free place is given out several times.",
    ),
    Mutant(
        name="13-count-only-queued",
        file="state_store.py",
        old="""cur.execute("SELECT COUNT(*) AS total FROM export_jobs WHERE status IN ('queued','running')")""",
        new="""cur.execute("SELECT COUNT(*) AS total FROM export_jobs WHERE status='queued'")""",
        fails=("13.1",),
        says=(("13.1", "a running job holds a place too"),),
        why="Running jobs are left out of the count (\"they are not waiting any more\"), yet they still hold a "
            "worker and a connection: with running leftovers the service admits past its limit.",
    ),
    Mutant(
        name="13-finished-jobs-hold-places",
        file="state_store.py",
        old="""cur.execute("SELECT COUNT(*) AS total FROM export_jobs WHERE status IN ('queued','running')")""",
        new="""cur.execute("SELECT COUNT(*) AS total FROM export_jobs """
            """WHERE status IN ('queued','running','failed')")""",
        fails=("13.1", "13.6"),
        says=(("13.1", "a failed, cancelled or succeeded job holds no place"),),
        why="Failed jobs are counted as if they still held a place (\"they may be retried\"): every failure shrinks "
            "the service for good, and submits are refused below the limit.",
    ),
    Mutant(
        name="13-admission-compares-with-greater",
        file="state_store.py",
        old='if cur.fetchone()["total"] >= limit:',
        new='if cur.fetchone()["total"] > limit:',
        fails=("13.1", "13.3", "13.6"),
        says=(("13.1", "refuse when count >= limit"),),
        why="`>` instead of `>=`: with exactly `limit` jobs in, the count equals the limit and one more is admitted; "
            "the last place is given out twice.",
    ),
    # ---- 13.2: the route
    Mutant(
        name="13-fast-boundary-off-by-one",
        file="state_store.py",
        old="return FAST_QUEUE if len(rows) <= FAST_MAX_ROWS else BULK_QUEUE",
        new="return FAST_QUEUE if len(rows) < FAST_MAX_ROWS else BULK_QUEUE",
        fails=("13.2",),
        why="A 30-row export is a short one (≤ 30), but `<` sends it to exports.bulk behind the long jobs.",
    ),
    # ---- 13.3: a full service says 503 + Retry-After
    Mutant(
        name="13-capacity-as-429",
        file="admission_adapter.py",
        old="            status_code=503,\n",
        new="            status_code=429,\n",
        fails=("13.3",),
        why="429 means one caller went over its own quota; a full service is 503 with Retry-After.",
    ),
    # ---- 13.4: the oldest waits least when served first
    Mutant(
        name="13-publisher-newest-first",
        file="publisher.py",
        old="ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        new="ORDER BY created_at DESC, id DESC LIMIT 1 FOR UPDATE SKIP LOCKED",
        fails=("13.4",),
        why="Newest events first \"so fresh requests feel fast\": after a backlog the oldest job is served last, "
            "and the oldest waiting age keeps growing until the queue is empty.",
    ),
    # ---- 13.5: a split that is really a split
    Mutant(
        name="13-everything-to-bulk",
        file="state_store.py",
        old="""        cur.execute("INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, %s)",
                    (str(uuid4()), job_id, queue_for(rows)))
""",
        new="""        cur.execute("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)", (str(uuid4()), job_id))
""",
        fails=("13.2", "13.5"),
        why="Lesson 12's outbox INSERT kept: every event takes the column default exports.bulk, so short jobs "
            "queue behind the long ones on the one busy bulk worker.",
    ),
    Mutant(
        name="13-publisher-waits-for-result",
        slow=True,  # 13.4 and 13.5 each run out 20 s waiting for confirms
        file="publisher.py",
        old="""    app.send_task("products.export", args=[event["job_id"]], task_id=event["id"],
                  queue=event["queue_name"], retry=False, ignore_result=True)
    with transaction() as cur:
""",
        new="""    app.send_task("products.export", args=[event["job_id"]], task_id=event["id"],
                  queue=event["queue_name"], retry=False).get(timeout=30)  # "confirm once it really ran"
    with transaction() as cur:
""",
        fails=("13.4", "13.5"),
        why="The publisher waits for each job to finish before it sends the next event: with the workers stopped "
            "the backlog never leaves the outbox, and one long bulk job stalls every short one upstream of the "
            "split queues.",
    ),
    # ---- 13.6: one limit, really used
    Mutant(
        name="13-limit-parameter-ignored",
        file="state_store.py",
        old="""    if cur.fetchone()["total"] >= limit:""",
        new="""    if cur.fetchone()["total"] >= 100:""",
        fails=("13.6",),
        why="The limit parameter is accepted but the comparison keeps the literal 100: lowering the limit to 5 "
            "changes nothing.",
    ),
    # ---- 13.7: claim one known row by waiting for it
    Mutant(
        name="13-claim-skip-locked",
        file="state_store.py",
        old="""        cur.execute(f"SELECT id FROM export_jobs WHERE id=%s AND {CLAIMABLE} FOR UPDATE",""",
        new="""        cur.execute(f"SELECT id FROM export_jobs WHERE id=%s AND {CLAIMABLE} FOR UPDATE SKIP LOCKED",""",
        fails=("13.7",),
        why="The course's claim: SKIP LOCKED on one known id.  The publisher's confirm share-locks the job row "
            "for a moment (its foreign-key check) while the message is already out; a claim landing then returns "
            "None and the job stays queued for good.",
    ),
]
