"""Lesson 16, step 3: check one job's end state against its file — by job id, database and disk both.

    python verify_terminal.py <job_id>

    state succeeded attempts 1
    artifact verified                          exit 0: the file is ours and holds the payload
    state failed attempts 3
    terminal without published artifact        exit 0: failed/cancelled and nothing published
    state running attempts 1
    not terminal yet                           exit 0: look again later
    ...: <reason>                              exit 1: the record and the file disagree

The file is compared with the payload as JSON values (decode_payload, then ==), never as text:
key order and spacing are the writer's business, the products are what count.  The database
connection is closed before the file is read.
"""

import json
import sys
from pathlib import Path
from uuid import UUID

from state_store import decode_payload, transaction

ARTIFACTS = Path("artifacts")  # this folder's artifacts; a shared mount would be resolved the same way


def fail(reason: str) -> None:
    print(f"verification failed: {reason}", file=sys.stderr)
    raise SystemExit(1)


def load_job(job_id: str) -> dict | None:
    with transaction() as cur:
        cur.execute("SELECT id, status, attempts, payload, result_ref, cancel_requested "
                    "FROM export_jobs WHERE id=%s", (job_id,))
        return cur.fetchone()  # the with-block ends here: connection closed before any file work


def verify(job_id: str) -> None:
    job = load_job(job_id)
    if job is None:
        fail(f"no job {job_id}")
    print("state", job["status"], "attempts", job["attempts"])
    if job["status"] == "succeeded":
        if not job["result_ref"]:
            fail("succeeded without a result_ref")
        if job["cancel_requested"]:
            fail("succeeded although a cancel was requested")
        root = ARTIFACTS.resolve()
        target = Path(job["result_ref"]).resolve()  # resolve first: '..' and symlinks cannot escape
        if not target.is_relative_to(root):
            fail(f"artifact outside {root}: {target}")
        try:
            content = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            fail(f"artifact unreadable: {type(exc).__name__}")
        if content != decode_payload(job["payload"]):
            fail("artifact content differs from the job payload")
        print("artifact verified")
    elif job["status"] in ("failed", "cancelled"):
        if job["result_ref"] is not None:
            fail(f"{job['status']} job still points at {job['result_ref']}")
        print("terminal without published artifact")
    else:
        print("not terminal yet")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python verify_terminal.py <job_id>")
    try:
        wanted = str(UUID(sys.argv[1]))
    except ValueError:
        raise SystemExit("the job id must be a UUID") from None
    verify(wanted)
