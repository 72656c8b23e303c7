"""Lesson 16 mutants: plausible mistakes in the phase logs, the monitor queries, the terminal check, the
record — and in the lesson 13–15 code the failure matrix exercises."""

import json

from shared.manifest import KIT_ROOT
from tests.mutants import Mutant

# The reference record, as committed: the record mutants below are cut from it, so they follow it when it is
# written again from a new run.
RECORD_TEXT = (KIT_ROOT / "lessons/16-failure-matrix/verification-record.json").read_text(encoding="utf-8")
ROWS = {row["case"]: row for row in json.loads(RECORD_TEXT)["cases"]}

# The curriculum's own verification-record.json, exactly as the course gives it: one row, nothing run.
COURSE_TEMPLATE = """{
  "case": "publish_after_send_before_mark",
  "job_id": "填写本次实际ID",
  "observed_states": [],
  "duplicate_deliveries": null,
  "recovery_seconds": null,
  "artifact_sha256": null,
  "result": "not_run",
  "products": "实际演练后填写；不要用预计行为替代观测"
}
"""


def row_text(case: str, until: str) -> str:
    """The reference record's text from `case`'s name to the first `until` after it."""
    start = RECORD_TEXT.index(f'"case": "{case}"')
    return RECORD_TEXT[start:RECORD_TEXT.index(until, start) + len(until)]


MUTANTS = [
    # ---- 16.1: the record is evidence, not a form
    Mutant(
        name="16-record-course-template",
        file="verification-record.json",
        old=RECORD_TEXT,
        new=COURSE_TEMPLATE,
        fails=("16.1",),
        why="The course's template left as it is: no drill was run, so no row is backed by evidence.",
    ),
    Mutant(
        name="16-record-pass-without-evidence",
        file="verification-record.json",
        old=row_text("sent_not_claimed", f'"job_id": "{ROWS["sent_not_claimed"]["job_id"]}",'),
        new=row_text("sent_not_claimed", '"result": "pass",') + '\n      "job_id": null,',
        fails=("16.1",),
        why="The row says pass without naming the job it ran on: a pass no job backs.",
    ),
    Mutant(
        name="16-record-fabricated-job-id",
        file="verification-record.json",
        old=f'"job_id": "{ROWS["publish_after_send_before_mark"]["job_id"]}",',
        new='"job_id": "12345678-1234-1234-1234-1234567890ab",',
        fails=("16.1",),
        why="A job id typed in, not read from a drill: it is no version-4 UUID, the kind uuid4() (this code's "
            "submit) makes, so no drill of this code made it.",
    ),
    Mutant(
        name="16-record-attempts-expected-not-read",
        file="verification-record.json",
        old=row_text("worker_exit_with_lease", '"attempts": 2,'),
        new=row_text("worker_exit_with_lease", '"attempts": 2,').replace('"attempts": 2,', '"attempts": 1,'),
        fails=("16.1",),
        why="attempts read before the recovered claim (or written from a guess): run again on this code the job "
            "ends with attempts 2.",
    ),
    # ---- 16.2: the terminal check trusts the file's existence
    Mutant(
        name="16-terminal-skips-content",
        file="verify_terminal.py",
        old='        if content != decode_payload(job["payload"]):\n'
            '            fail("artifact content differs from the job payload")\n',
        new="",
        fails=("16.2",),
        why="verify_terminal only checks that the file parses: a file with other values still 'verifies'.",
    ),
    # ---- 16.3 (+16.8): an off-by-one at the admission gate lets one more job in than the limit
    Mutant(
        name="16-gate-off-by-one",
        file="state_store.py",
        old='    if cur.fetchone()["total"] >= limit:\n',
        new='    if cur.fetchone()["total"] > limit:\n',
        fails=("16.3", "16.8"),
        why="With '>' the gate admits limit+1 jobs: the queue-full row sees a third 202 where a 503 was due.",
    ),
    # ---- 16.4 (+16.8): slots named per hour — the cross-minute row no longer shows its second slot
    Mutant(
        name="16-slot-per-hour",
        file="schedule_tasks.py",
        old='SLOT_FORMAT = "shop-export:%Y%m%dT%H%M"',
        new='SLOT_FORMAT = "shop-export:%Y%m%dT%H"',
        fails=("16.4", "16.8"),
        says=(("16.4", "the slot name in schedule_tasks.py must carry the minute"),),
        why="Dropping the minute merges 10:00 and 10:01 into one slot: the documented cross-minute boundary "
            "(two slots, two jobs) is no longer what the system does.",
    ),
    # ---- 16.5: past the deadline, recovery keeps requeueing instead of failing the job
    Mutant(
        name="16-recovery-ignores-deadline",
        file="recovery.py",
        old='    if row["expired"]:\n        return "failed", "deadline_exceeded", 0\n',
        new="",
        fails=("16.5",),
        why="Without the deadline branch a job past deadline_at is re-sent (queued, new event) again and again "
            "instead of ending failed with a dead letter.",
    ),
    # ---- 16.4/16.5: lesson 15's claim typed without the backoff, checked at lesson 16
    Mutant(
        name="16-claim-ignores-backoff",
        file="state_store.py",
        old="               AND deadline_at>NOW(6) AND next_attempt_at<=NOW(6)\"\"\"",
        new="               AND deadline_at>NOW(6)\"\"\"",
        fails=("16.1", "16.4", "16.5", "16.8"),
        says=(("16.1", "duplicates and claims during the backoff must neither claim nor raise attempts"),),
        why="The backoff rows fail and say so; the worker_exit_with_lease row must still pass: its killed "
            "delivery comes back during the backoff, and this claim takes it then, not before recovery queued the "
            "job (the row keeps the worker stopped until then).",
    ),
    # ---- 16.6: the whole job (payload included) copied into a log line "for context"
    Mutant(
        name="16-log-whole-job",
        file="export_tasks.py",
        old='    log_phase(job_id, "claimed", message_id, token, attempt)\n',
        new='    log_phase(job_id, "claimed", message_id, token, attempt, detail=str(job))\n',
        fails=("16.6",),
        says=(("16.6", "a product description"),),
        why="str(job) carries the payload: product descriptions end up in the worker log.",
    ),
    # ---- 16.6: the database URL (password inside) logged "to see which database it talked to"
    Mutant(
        name="16-log-database-url",
        file="export_tasks.py",
        old='    log_phase(job_id, "claimed", message_id, token, attempt)\n',
        new=('    import os\n'
             '    log_phase(job_id, "claimed", message_id, token, attempt, database=os.environ.get("DATABASE_URL"))\n'),
        fails=("16.6",),
        says=(("16.6", '"database": "***"'),),
        why="DATABASE_URL carries the MySQL password: the log line leaks it (the message quotes the line, "
            "redacted, with the field that leaks).",
    ),
    # ---- 16.7: an empty backlog reported as 0 seconds old
    Mutant(
        name="16-monitor-null-age-as-zero",
        file="monitor_exports.sql",
        old="       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) / 1000000 AS oldest_unpublished_seconds\n",
        new="       COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) / 1000000, 0)"
            " AS oldest_unpublished_seconds\n",
        fails=("16.7",),
        why="COALESCE(..., 0) turns 'nothing is waiting' into 'waited 0 seconds', two different facts.",
    ),
    # ---- 16.7: milliseconds reported as seconds — the age must match the server's own clock
    Mutant(
        name="16-monitor-age-in-milliseconds",
        file="monitor_exports.sql",
        old="NOW(6)) / 1000000\n         AS oldest_dispatch_age",
        new="NOW(6)) / 1000\n         AS oldest_dispatch_age",
        fails=("16.7",),
        why="Dividing microseconds by 1000 gives milliseconds: a dispatch 75 s old reads as 75000 s, outside what "
            "the server's clock before and after the query allows.",
    ),
    # ---- 16.9: a generous backoff pushes the expired-lease path past its 60 s budget
    Mutant(
        name="16-backoff-over-budget",
        file="recovery.py",
        old="LEASE_BACKOFF = 10        #",
        new="LEASE_BACKOFF = 90        #",
        fails=("16.9",),
        why="Recovery still works, but an expired lease is back in processing only after ~90 s: over the 60 s "
            "budget the lesson sets.",
    ),
    # ---- 16.10: the completion line reports the intent, not finish's answer
    Mutant(
        name="16-log-success-not-from-finish",
        file="export_tasks.py",
        old='    log_phase(job_id, "published", message_id, token, attempt, success=published)\n',
        new='    log_phase(job_id, "published", message_id, token, attempt, success=True)\n',
        fails=("16.10",),
        why="Every execution logs success=True: the old token's late run looks published, so the logs can no "
            "longer tell which delivery produced the result.",
    ),
]
