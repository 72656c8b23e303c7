"""Lesson 11 mutants: plausible mistakes with job state, leases, tokens and transactions in MySQL."""

from tests.mutants import Mutant

WRITE = '    target.write_text(json.dumps(job["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")\n'

CLAIM_LOCK_AND_CAS = (
    '        cur.execute(f"SELECT id FROM export_jobs WHERE id=%s AND {CLAIMABLE} FOR UPDATE SKIP LOCKED",\n'
    '''                    (job_id, MAX_ATTEMPTS))
        if cur.fetchone() is None:
            return None
        # The same conditions again: the UPDATE is the compare-and-set, not just the lock above.
        cur.execute(
            f"""UPDATE export_jobs SET status='running', attempts=attempts+1, lease_token=%s,
                   lease_until=DATE_ADD(NOW(6), INTERVAL %s SECOND), error_code=NULL, updated_at=NOW(6)
                WHERE id=%s AND {CLAIMABLE}""",
            (token, LEASE_SECONDS, job_id, MAX_ATTEMPTS),
        )
''')

SUBMIT_BODY = '''    with transaction() as cur:
        rows = read_snapshot(cur, product_ids)  # invalid input raises here: nothing inserted
        cur.execute(
            "INSERT INTO export_jobs (id, payload, deadline_at) "
            "VALUES (%s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (job_id, json.dumps(rows, ensure_ascii=False), DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the job insert did not create exactly one row")
'''

MUTANTS = [
    # ---- 11.1: durable row, fixed snapshot
    Mutant(
        name="11-worker-rereads-products",
        file="export_tasks.py",
        old=WRITE,
        new='''    from state_store import read_snapshot, transaction
    with transaction() as cur:  # "fresher is better": read the products again at run time
        rows = read_snapshot(cur, [row["id"] for row in job["payload"]])
    target.write_text(json.dumps(rows, ensure_ascii=False, sort_keys=True), encoding="utf-8")
''',
        fails=("11.1",),
        why="The worker exports today's products instead of the snapshot: an edit after submit changes the result.",
    ),
    # ---- 11.2: one claimer wins
    Mutant(
        name="11-claim-no-lock-plain-update",
        file="state_store.py",
        old=CLAIM_LOCK_AND_CAS,
        new='''        cur.execute(f"SELECT id FROM export_jobs WHERE id=%s AND {CLAIMABLE}", (job_id, MAX_ATTEMPTS))
        if cur.fetchone() is None:
            return None
        # checked above, so a plain update by id will do
        cur.execute(
            """UPDATE export_jobs SET status='running', attempts=attempts+1, lease_token=%s,
                   lease_until=DATE_ADD(NOW(6), INTERVAL %s SECOND), error_code=NULL, updated_at=NOW(6)
                WHERE id=%s""",
            (token, LEASE_SECONDS, job_id),
        )
''',
        fails=("11.2",),
        why="Check-then-update without a lock or a condition: every claimer that read 'queued' before the "
            "first commit also 'wins' and gets its own token.",
    ),
    # ---- 11.3: old tokens stay powerless
    Mutant(
        name="11-finish-ignores-deadline",
        file="state_store.py",
        old="                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE\"\"\",",
        new="                 AND lease_until>NOW(6) AND cancel_requested=FALSE\"\"\",",
        fails=("11.3",),
        why="finish trusts the lease alone: a token still publishes after the job's business deadline.",
    ),
    Mutant(
        name="11-finish-by-id-only",
        file="state_store.py",
        old="""               WHERE id=%s AND status='running' AND lease_token=%s
                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE\"\"\",
            (result_ref, job_id, token),""",
        new="""               WHERE id=%s AND status='running'\"\"\",
            (result_ref, job_id),""",
        fails=("11.3", "11.6"),
        says=(("11.3", "compare lease_token"), ("11.6", "finish's WHERE must compare lease_token")),
        why="finish updates by job id: a stale executor with an expired or replaced token publishes (pitfall 1).",
    ),
    # ---- 11.4: no transaction across the file write
    Mutant(
        name="11-write-inside-transaction",
        file="export_tasks.py",
        old=WRITE,
        new='''    from state_store import transaction
    with transaction() as cur:  # hold the row while writing, "to be safe"
        cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE", (job_id,))
        target.write_text(json.dumps(job["payload"], ensure_ascii=False, sort_keys=True), encoding="utf-8")
''',
        fails=("11.4",),
        why="A row lock and an open transaction are held for the whole file write.",
    ),
    # ---- 11.5: durable backoff
    Mutant(
        name="11-claim-ignores-next-attempt",
        file="state_store.py",
        old="               AND deadline_at>NOW(6) AND next_attempt_at<=NOW(6)\"\"\"",
        new="               AND deadline_at>NOW(6)\"\"\"",
        fails=("11.5",),
        why="claim ignores next_attempt_at: any duplicate message skips the durable backoff.",
    ),
    # ---- 11.6: recovery before a new claim, attempts kept
    Mutant(
        name="11-claim-takes-expired-running",
        file="state_store.py",
        old="CLAIMABLE = \"\"\"status='queued' AND",
        new="CLAIMABLE = \"\"\"(status='queued' OR (status='running' AND lease_until<NOW(6))) AND",
        fails=("11.6",),
        why="An expired running job is grabbed directly by whatever message comes next, skipping recovery "
            "and its backoff.",
    ),
    Mutant(
        name="11-claim-resets-attempts",
        file="state_store.py",
        old="SET status='running', attempts=attempts+1, lease_token=%s,",
        new="SET status='running', attempts=1, lease_token=%s,",
        fails=("11.6",),
        why="attempts is set instead of counted: the claim after recovery still says 1, so the attempt limit "
            "never bites.",
    ),
    # ---- 11.7: HTTP read path
    Mutant(
        name="11-api-error-as-404",
        file="api_db.py",
        old="raise HTTPException(status_code=503, detail=\"the job store is unavailable\",",
        new="raise HTTPException(status_code=404, detail=\"the job store is unavailable\",",
        fails=("11.7",),
        why="A database error answered as 404: clients give up on jobs that exist.",
    ),
    Mutant(
        name="11-api-reads-celery",
        file="api_db.py",
        old="""        with transaction() as cur:
            cur.execute(f"SELECT {', '.join(FIELDS)} FROM export_jobs WHERE id=%s", (job_id,))
            row = cur.fetchone()
""",
        new="""        from export_tasks import export_products
        result = export_products.AsyncResult(job_id)
        row = None if result.state == "PENDING" else {"id": job_id, "status": result.state.lower()}
""",
        fails=("11.7",),
        why="The read path asks the Celery result cache: PENDING (never run, expired, unknown) becomes 404.",
    ),
    # ---- 11.8: bad input
    Mutant(
        name="11-isinstance-accepts-true",
        file="state_store.py",
        old="type(product_id) is not int or product_id <= 0",
        new="not isinstance(product_id, int) or product_id <= 0",
        fails=("11.8",),
        why="isinstance(True, int) is True: [True] exports product 1.",
    ),
    Mutant(
        name="11-no-size-limit",
        file="state_store.py",
        old="not 1 <= len(product_ids) <= MAX_PRODUCTS",
        new="not product_ids",
        fails=("11.8",),
        why="No upper bound: 101 products (or 100,000) go into one job.",
    ),
    Mutant(
        name="11-row-before-validation",
        file="state_store.py",
        old=SUBMIT_BODY,
        new='''    with transaction() as cur:  # record the request first, fill in the snapshot afterwards
        cur.execute("INSERT INTO export_jobs (id, payload, deadline_at) "
                    "VALUES (%s, '[]', DATE_ADD(NOW(6), INTERVAL %s MINUTE))", (job_id, DEADLINE_MINUTES))
    with transaction() as cur:
        rows = read_snapshot(cur, product_ids)
        cur.execute("UPDATE export_jobs SET payload=%s WHERE id=%s",
                    (json.dumps(rows, ensure_ascii=False), job_id))
''',
        fails=("11.8",),
        why="The row is committed before the input is checked: every rejected submit leaves an empty job behind.",
    ),
    # ---- 11.9: URL parsing
    Mutant(
        name="11-stray-percent-accepted",
        file="state_store.py",
        old="""    if re.search(r"%(?![0-9A-Fa-f]{2})", value):
        raise ValueError("invalid percent-encoding in the database URL")
""",
        new="",
        fails=("11.9",),
        why="unquote keeps '%zz' as it is: the wrong password reaches the server and fails later as "
            "'access denied' instead of a clear local error.",
    ),
    Mutant(
        name="11-error-echoes-url",
        file="state_store.py",
        old='raise ValueError("the database URL must start with mysql+pymysql://")',
        new='raise ValueError(f"the database URL must start with mysql+pymysql://, got {url}")',
        fails=("11.9",),
        why="The error message repeats the URL, password included, into logs and terminals.",
    ),
    # ---- 11.10: lease renewal (exercise)
    Mutant(
        name="11-renew-revives-expired",
        file="state_store.py",
        old="""    live = \"\"\"id=%s AND lease_token=%s AND status='running' AND lease_until>NOW(6)
              AND deadline_at>NOW(6)""",
        new="""    live = \"\"\"id=%s AND lease_token=%s AND status='running'
              AND deadline_at>NOW(6)""",
        fails=("11.10",),
        why="An expired lease renews itself, although another executor may already hold the job.",
    ),
    Mutant(
        name="11-renew-past-deadline",
        file="state_store.py",
        old="SET lease_until=LEAST(DATE_ADD(NOW(6), INTERVAL %s SECOND), deadline_at)",
        new="SET lease_until=DATE_ADD(NOW(6), INTERVAL %s SECOND)",
        fails=("11.10",),
        why="The renewed lease outlives the job's deadline.",
    ),
    Mutant(
        name="11-renew-trusts-rowcount",
        file="state_store.py",
        old="""        cur.execute(f"SELECT 1 AS ok FROM export_jobs WHERE {live}", (job_id, token))
        return cur.fetchone() is not None
""",
        new="""        return cur.rowcount == 1
""",
        fails=("11.10",),
        why="rowcount 0 also means 'already at this end time': a live lease capped at the deadline is "
            "reported lost.",
    ),
]
