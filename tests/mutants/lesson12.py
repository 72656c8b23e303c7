"""Lesson 12 mutants: plausible mistakes with the transactional outbox and its publisher."""

from tests.mutants import Mutant

SEND = '''    app.send_task("products.export", args=[event["job_id"]], task_id=event["id"],
                  queue="exports", retry=False, ignore_result=True)
'''

CONFIRM = '''    with transaction() as cur:
        cur.execute(
            """UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL
               WHERE id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)""",
            (event["id"], event["claim_token"]),
        )
        # 0 rows: our claim expired and another publisher took over (it will confirm its own send).
        return cur.rowcount == 1
'''

OUTBOX_INSERT = '''        # Any exception from here on leaves the with-block and rolls the job row back too.
        cur.execute("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)", (str(uuid4()), job_id))
        if cur.rowcount != 1:
            raise RuntimeError("the outbox insert did not create exactly one row")
'''

MUTANTS = [
    # ---- 12.1: the submitter only writes MySQL; the publisher is the one way out
    Mutant(
        name="12-submitter-still-delays",
        file="submit_db_export.py",
        old="    job_id = submit_snapshot([product_id])  # job + outbox event, one commit; no delay() any more\n",
        new="""    job_id = submit_snapshot([product_id])
    from export_tasks import export_products
    export_products.delay(job_id)  # left over from lesson 11: "just to be quick"
""",
        fails=("12.1",),
        why="The submitter still sends its own message: the job runs outside the outbox, a second path to the broker.",
    ),
    # ---- 12.2: a failed send must leave sent_at NULL
    Mutant(
        name="12-swallow-send-error",
        slow=True,  # the publisher's own retries while Redis is down
        file="publisher.py",
        old=SEND,
        new='''    try:
        app.send_task("products.export", args=[event["job_id"]], task_id=event["id"],
                      queue="exports", retry=False, ignore_result=True)
    except Exception as exc:  # "log it and move on"
        print("send failed:", exc)
''',
        fails=("12.2",),
        why="The send error is swallowed and the event is confirmed anyway: sent_at says sent, "
            "the broker never got it.",
    ),
    Mutant(
        name="12-mark-sent-before-sending",
        slow=True,  # 12.3 waits 15 s for a delivery that is never sent
        file="publisher.py",
        old=SEND + CONFIRM,
        new=CONFIRM.replace("        return cur.rowcount == 1\n", "        confirmed = cur.rowcount == 1\n") + SEND
        + "    return confirmed\n",
        fails=("12.2", "12.3"),
        why="sent_at is written before the send: a broker outage loses the event for good, and a crash after the "
            "send can never be followed by a second delivery.",
    ),
    # ---- 12.3: a repeated delivery must not produce a second result
    Mutant(
        name="12-claim-reopens-finished-jobs",
        file="state_store.py",
        old='CLAIMABLE = """status=\'queued\' AND cancel_requested=FALSE',
        new='CLAIMABLE = """status IN (\'queued\',\'succeeded\') AND cancel_requested=FALSE',
        fails=("12.3",),
        why="A repeated message re-runs a finished job: the outbox's second delivery replaces the published result.",
    ),
    # ---- 12.4: SKIP LOCKED that really skips
    Mutant(
        name="12-outbox-index-not-matching-order",
        file="schema_outbox.sql",
        old="  KEY export_outbox_pending (sent_at, created_at, id),\n",
        new="  KEY export_outbox_pending (sent_at, available_at, created_at),\n",
        fails=("12.4",),
        why="The ORDER BY created_at is not served by the index: the server sorts every pending row and FOR UPDATE "
            "locks them all, so a second publisher finds nothing to claim.",
    ),
    Mutant(
        name="12-claim-without-skip-locked",
        file="publisher.py",
        old="ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        new="ORDER BY created_at, id LIMIT 1 FOR UPDATE",
        fails=("12.4",),
        why="Without SKIP LOCKED a second publisher waits for the first one's lock (and times out) instead of "
            "taking the next event.",
    ),
    # ---- 12.5: job and event commit together or not at all
    Mutant(
        name="12-job-and-outbox-separate-transactions",
        file="state_store.py",
        old=OUTBOX_INSERT,
        new='''    with transaction() as cur:  # a second transaction "to keep things separate"
        cur.execute("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)", (str(uuid4()), job_id))
        if cur.rowcount != 1:
            raise RuntimeError("the outbox insert did not create exactly one row")
''',
        fails=("12.5",),
        why="The job commits before the outbox insert: a failure in between leaves an accepted job "
            "nobody will announce.",
    ),
    # ---- 12.6: only the claim's holder confirms
    Mutant(
        name="12-confirm-without-claim-token",
        file="publisher.py",
        old="""               WHERE id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)\"\"\",
            (event["id"], event["claim_token"]),""",
        new="""               WHERE id=%s AND sent_at IS NULL\"\"\",
            (event["id"],),""",
        fails=("12.6",),
        why="The confirm marks the event by id alone: a publisher whose claim ran out while it sent confirms the "
            "send of the publisher that took the event over.",
    ),
]
