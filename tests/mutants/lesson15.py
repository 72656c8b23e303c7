"""Lesson 15 mutants: plausible mistakes with cancellation, recovery scans, dead letters, replay and shutdown."""

from tests.mutants import Mutant

FINISH_WHERE = """               WHERE id=%s AND status='running' AND lease_token=%s
                 AND lease_until>NOW(6) AND deadline_at>NOW(6) AND cancel_requested=FALSE\"\"\",
            (result_ref, job_id, token),"""

BOUNDARY = """    if not can_continue(job_id, token):
        return {"job_id": job_id, "claimed": True, "attempt": job["attempts"], "published": False}
"""

CONFIRM = '''        cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE", (event["job_id"],))
        if cur.fetchone() is None:
            raise RuntimeError("the outbox event refers to a job that does not exist")
        cur.execute(
            """UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL
               WHERE id=%s AND job_id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)""",
            (event["id"], event["job_id"], event["claim_token"]),
        )
        # 0 rows: our claim expired and another publisher took over (it will confirm its own send).
        # Then the dispatch time is not ours to move either.
        confirmed = cur.rowcount == 1
'''

SCAN_WHERE = """    WHERE (j.status='running' AND j.lease_until<NOW(6))
       OR (j.status='queued'
           AND (j.cancel_requested=TRUE OR j.deadline_at<=NOW(6) OR j.attempts>=%(max)s))
       OR (j.status='queued' AND j.next_attempt_at<=NOW(6)
           AND j.cancel_requested=FALSE AND j.deadline_at>NOW(6) AND j.attempts<%(max)s
           -- an unsent event means a dispatch is already on its way: do not add another
           AND NOT EXISTS (SELECT 1 FROM export_outbox AS pending
                           WHERE pending.job_id=j.id AND pending.sent_at IS NULL)
           -- the last sign of life (change, due time, dispatch) is older than the unclaimed budget
           AND GREATEST(j.updated_at, j.next_attempt_at,
                        COALESCE(j.last_dispatched_at,
                                 (SELECT MAX(o.sent_at) FROM export_outbox AS o WHERE o.job_id=j.id),
                                 j.created_at))
               < DATE_SUB(NOW(6), INTERVAL %(unclaimed)s SECOND))
"""

MUTANTS = [
    # ---- 15.1: a cancel must stop the work and can never end in a success
    Mutant(
        name="15-finish-ignores-cancel",
        file="state_store.py",
        old=FINISH_WHERE,
        new=FINISH_WHERE.replace(" AND cancel_requested=FALSE", ""),
        fails=("15.1",),
        why="finish only checks the lease: a job cancelled while its file is written is still published as a success.",
    ),
    Mutant(
        name="15-no-check-at-work-boundary",
        file="export_tasks.py",
        old=BOUNDARY,
        new="",
        fails=("15.1",),
        why="The task checks nothing after its claim: a cancel that arrives before the write still produces the "
            "file (finish refuses it later, but the work was done anyway).",
    ),
    # ---- 15.2: recovery requeues expired leases only, with the backoff, never resetting attempts
    Mutant(
        name="15-recovery-resets-attempts",
        file="recovery.py",
        old="                   SET status=%s, error_code=%s, lease_token=NULL, lease_until=NULL,\n",
        new="                   SET status=%s, error_code=%s, lease_token=NULL, lease_until=NULL, attempts=0,\n",
        fails=("15.2", "15.8"),
        why="A requeue 'gives the job a fresh start': the attempt limit never bites and a poison job loops forever.",
    ),
    Mutant(
        name="15-recovery-takes-live-leases",
        file="recovery.py",
        old="    WHERE (j.status='running' AND j.lease_until<NOW(6))\n",
        new="    WHERE (j.status='running')\n",
        fails=("15.2",),
        why="The scan requeues every running job (pitfall 2): a live executor now races a second worker.",
    ),
    # ---- 15.3: replay is a new job; the failure evidence stays
    Mutant(
        name="15-replay-requeues-old-job",
        file="replay_job.py",
        old='''        cur.execute(
            "INSERT INTO export_jobs (id, payload, replay_of, deadline_at) "
            "VALUES (%s, %s, %s, DATE_ADD(NOW(6), INTERVAL %s MINUTE))",
            (new_id, json.dumps(payload, ensure_ascii=False), old_id, DEADLINE_MINUTES),
        )
        if cur.rowcount != 1:
            raise RuntimeError("the replay job was not created")
        cur.execute("INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, 'exports.bulk')",
                    (str(uuid4()), new_id))
''',
        new='''        # "just run it again": put the failed job back in the queue and clear its record
        new_id = old_id
        cur.execute("""UPDATE export_jobs SET status='queued', attempts=0, error_code=NULL,
                         deadline_at=DATE_ADD(NOW(6), INTERVAL %s MINUTE), next_attempt_at=NOW(6)
                       WHERE id=%s""", (DEADLINE_MINUTES, old_id))
        cur.execute("DELETE FROM export_dead_letters WHERE job_id=%s", (old_id,))
        cur.execute("INSERT INTO export_outbox (id, job_id, queue_name) VALUES (%s, %s, 'exports.bulk')",
                    (str(uuid4()), new_id))
''',
        fails=("15.3",),
        why="The failed job is flipped back to queued and its dead letter deleted: the failure evidence is gone "
            "and nothing records that this run is a replay.",
    ),
    # ---- 15.4: one recovery event per lost dispatch, and scanners that really skip
    Mutant(
        name="15-recovery-without-pending-check",
        file="recovery.py",
        old="""           AND NOT EXISTS (SELECT 1 FROM export_outbox AS pending
                           WHERE pending.job_id=j.id AND pending.sent_at IS NULL)
""",
        new="",
        fails=("15.4",),
        why="The scan ignores the event it already added: every pass stacks another unsent event for the same job.",
    ),
    Mutant(
        name="15-recovery-order-not-indexed",
        file="recovery.py",
        old="    ORDER BY j.status, j.updated_at, j.id\n",
        new="    ORDER BY j.updated_at, j.id\n",
        fails=("15.4",),
        why="The ORDER BY is no longer served by export_jobs_recovery_scan: the server sorts every candidate and "
            "FOR UPDATE locks them all, so a second scanner finds nothing to do.",
    ),
    Mutant(
        name="15-recovery-scan-as-in-the-course",
        file="recovery.py",
        old="    FROM export_jobs AS j FORCE INDEX (export_jobs_recovery_scan)\n" + SCAN_WHERE
            + "    -- status first: the index returns rows in this order, so only the rows returned get locked\n"
            "    ORDER BY j.status, j.updated_at, j.id\n",
        new="    FROM export_jobs AS j\n" + SCAN_WHERE + "    ORDER BY j.updated_at, j.id\n",
        fails=("15.4",),
        why="The course's scan as written (no FORCE INDEX, ORDER BY j.updated_at, j.id): the server sorts every "
            "candidate and FOR UPDATE locks them all; the failure must name the plan, the rows locked and the fix.",
    ),
    # ---- 15.5: the durable backoff holds against duplicate messages
    Mutant(
        name="15-claim-ignores-backoff",
        file="state_store.py",
        old="               AND deadline_at>NOW(6) AND next_attempt_at<=NOW(6)\"\"\"",
        new="               AND deadline_at>NOW(6)\"\"\"",
        fails=("15.5",),
        says=(("15.5", "claim need next_attempt_at<=NOW(6)"),),
        why="claim trusts the message's timing: a duplicate already in the queue runs the job during its backoff.",
    ),
    # ---- 15.6: confirm with the current token, job row first, one transaction
    Mutant(
        name="15-confirm-without-claim-token",
        file="publisher.py",
        old="WHERE id=%s AND job_id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)\"\"\",\n"
            "            (event[\"id\"], event[\"job_id\"], event[\"claim_token\"]),",
        new="WHERE id=%s AND job_id=%s AND sent_at IS NULL AND claim_until>NOW(6)\"\"\",\n"
            "            (event[\"id\"], event[\"job_id\"]),",
        fails=("15.6",),
        why="A publisher whose claim was taken over still confirms: it marks someone else's send and pushes the "
            "job's dispatch time forward, delaying recovery.",
    ),
    Mutant(
        name="15-confirm-outbox-before-job",
        file="publisher.py",
        old=CONFIRM,
        new='''        cur.execute(
            """UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL
               WHERE id=%s AND job_id=%s AND claim_token=%s AND sent_at IS NULL AND claim_until>NOW(6)""",
            (event["id"], event["job_id"], event["claim_token"]),
        )
        confirmed = cur.rowcount == 1
        # and now the job, to record the dispatch time
        cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE", (event["job_id"],))
        if cur.fetchone() is None:
            raise RuntimeError("the outbox event refers to a job that does not exist")
''',
        fails=("15.6",),
        why="The confirm locks the outbox row first and the job second — the reverse of the recovery scan, so the "
            "two can deadlock.",
    ),
    # ---- 15.7: one TERM is a warm shutdown
    Mutant(
        name="15-term-escalates-to-cold-shutdown",
        file="celery_app.py",
        old='load_dotenv(".env.tasks")\n',
        new='''load_dotenv(".env.tasks")

from celery.signals import worker_shutting_down  # noqa: E402


@worker_shutting_down.connect
def _do_not_wait(how=None, **_):
    # "deploys should not wait for long exports": follow the TERM with a second signal at once
    if how == "Warm":
        import signal
        os.kill(os.getpid(), signal.SIGQUIT)
''',
        fails=("15.7",),
        why="TERM is followed by a second signal (SIGQUIT): a cold shutdown kills the running export instead of "
            "letting it finish.",
    ),
    # ---- 15.8: attempts run out for good
    Mutant(
        name="15-recovery-never-exhausts",
        file="recovery.py",
        old="""    if row["attempts"] >= MAX_ATTEMPTS:
        return "failed", "attempts_exhausted", 0
""",
        new="",
        fails=("15.8",),
        why="The scan has no attempt limit: a job that keeps losing its lease is requeued forever instead of "
            "being quarantined.",
    ),
]
