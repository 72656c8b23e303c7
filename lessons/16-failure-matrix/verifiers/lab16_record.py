"""Lesson 16's verification record (kit module, not a lesson file): the form rules that judge the learner's
record (16.1) and the kit's own (16.8), and the writer of the kit's, $TASKLAB_LOG_DIR/verification-record.json.
Whether a row is also backed by facts is lab16_evidence's question.

    pass     a real job_id (a UUID), an operation time, observed_states holding real statuses, a
             measured recovery_seconds (a number >= 0) and a counted duplicate_deliveries
    fail     it ran, so it says what was seen or why it failed
    not_run  anything else: a row nobody ran never claims a result
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from shared.lesson_celery import LOG_DIR
from shared.i18n import t

RECORD = LOG_DIR / "verification-record.json"
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
RESULTS = ("pass", "fail", "not_run")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def collapse(states: list[str]) -> list[str]:
    """One entry per run of the same status (a change of attempts or token alone repeats it)."""
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


def is_uuid(value) -> bool:
    try:
        UUID(str(value))
        return isinstance(value, str)
    except ValueError:
        return False


def _is_time(value) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def rows_of(document) -> list:
    """The case rows of a record: one object, a list of objects, or {"cases": [...]}. """
    if isinstance(document, dict):
        return document["cases"] if isinstance(document.get("cases"), list) else [document]
    return document if isinstance(document, list) else []


def row_problems(row) -> list[str]:
    """Why this row cannot be trusted as written (an empty list: it is consistent)."""
    if not isinstance(row, dict):
        return [t("the row is not a JSON object")]
    case = row.get("case")
    name = case if isinstance(case, str) and case else "?"
    problems = []
    if not isinstance(case, str) or not case.strip():
        problems.append(t("no case name"))
    result = row.get("result")
    if result not in RESULTS:
        return [*problems, t("{name}: result must be pass, fail or not_run, got {result!r}", name=name, result=result)]
    if result == "not_run":
        return problems
    if not _is_time(row.get("operated_at")):
        problems.append(t("{name}: {result} needs the real operation time operated_at (ISO 8601)", name=name,
                          result=result))
    states = row.get("observed_states")
    if result == "pass":
        if not is_uuid(row.get("job_id")):
            problems.append(t("{name}: pass needs this run's real job_id (a UUID), got {job_id!r}", name=name,
                              job_id=row.get('job_id')))
        if not (isinstance(states, list) and states and all(isinstance(s, str) and s for s in states)):
            problems.append(t("{name}: pass needs the observed_states actually read (a non-empty list)", name=name))
        elif not any(s in STATUSES for s in states):
            problems.append(t("{name}: observed_states holds no real status ({statuses})", name=name,
                              statuses=', '.join(STATUSES)))
        seconds = row.get("recovery_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            problems.append(t("{name}: pass needs a measured recovery_seconds (a number >= 0), got {seconds!r}",
                              name=name, seconds=seconds))
        deliveries = row.get("duplicate_deliveries")
        if isinstance(deliveries, bool) or not isinstance(deliveries, int) or deliveries < 0:
            problems.append(t("{name}: pass needs a counted duplicate_deliveries (an integer), got {deliveries!r}",
                              name=name, deliveries=deliveries))
        digest = row.get("artifact_sha256")
        if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                       and all(ch in "0123456789abcdef" for ch in digest)):
            problems.append(t("{name}: artifact_sha256 must be 64 hex digits or null", name=name))
    else:  # fail: it ran; say what happened
        if not (states or row.get("notes") or row.get("error")):
            problems.append(t("{name}: fail needs what was seen or why (observed_states / notes)", name=name))
    return problems


# ================================================================ the kit's record

def empty_row(case) -> dict:
    """A catalogue row nobody has run (case: the matrix's Case, whose texts() are in the learner's language)."""
    point, operation, expect = case.texts()
    return {"case": case.id, "fault_point": point, "operation": operation, "expect": expect,
            "job_id": None, "operated_at": None, "observed_states": [], "transitions": [], "message_ids": [],
            "deliveries": None, "duplicate_deliveries": None, "attempts": None, "recovery_seconds": None,
            "redispatches": [], "artifact_sha256": None, "result": "not_run", "notes": []}


FIELDS = {
    "observed_states": "the main job's committed statuses in commit order (a kit trigger on export_jobs writes "
                       "each change of status, attempts or lease_token, inside the changing transaction), with "
                       "what the kit saw placed after the change it followed (absent, queued+unsent, "
                       "celery:PENDING …)",
    "transitions": "the same changes with their attempts and (shortened) lease_token, in commit order",
    "deliveries": "task starts the worker really ran for the job; duplicate_deliveries = deliveries - attempts",
    "redispatches": "re-dispatches by the system's own unclaimed recovery, each with the fact that allowed it: "
                    "every message of the job had been delivered and had ended, the job was still queued, and the "
                    "last delivery's claim raised (the database refused it); a delivery that returned "
                    "claimed=False for a claimable job fails the row instead",
    "recovery_seconds": "from the injection (worker_exit_with_lease: from the lease expiry) to the row's "
                        "recovered condition = measured_seconds + time_moved_seconds",
    "time_moved_seconds": "durable time moved into the past instead of waited for (leases, backoffs, "
                          "dispatch ages, publisher claims)",
    "setup_time_moved_seconds": "time moved to set the scene before the fault; not part of recovery",
}


def build_record(cases: list, rows: dict[str, dict], broker: str, extra: dict | None = None) -> dict:
    """The record of every catalogue row, in catalogue order: the rows run so far, the others not_run."""
    found = [rows.get(case.id) or empty_row(case) for case in cases]
    return {
        "record": "lesson 16 failure matrix",
        "generated_by": "verifiers/lab16_failure_matrix.py",
        "generated_at": now_iso(),
        "broker": broker,
        **(extra or {}),
        "fields": FIELDS,
        "summary": {r: sum(1 for c in found if c["result"] == r) for r in RESULTS},
        "cases": found,
    }


def write_record(record: dict, path: Path = RECORD) -> Path:
    """Written whole (a temporary file, then a rename): a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, ensure_ascii=False, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
