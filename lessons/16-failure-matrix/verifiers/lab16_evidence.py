"""Lesson 16's evidence (kit module, not a lesson file): is a record backed by facts?

A row this run wrote is backed when the database and the worker's deliveries, read now, say what it says
(16.8, 16.1).  The learner's job_ids name jobs in a database no check run sees, so each of the learner's
pass rows is re-earned instead (16.1): run again on the learner's code, and the learner's row must say what
this run shows — the statuses in order and where they end, the attempts, an artifact exactly when the job
succeeded — with a job id of the kind the learner's code makes (the same UUID version).
"""

from __future__ import annotations

import json
from uuid import UUID

from lab16_cases import CASE_IDS
from lab16_fixture import artifact_evidence, deliveries, transitions_of
from lab16_record import STATUSES, collapse, is_uuid, rows_of

from shared.events import short
from shared.settings import WORK
from shared.i18n import t
from shared.lesson_db import job_row

LEARNER_RECORD = WORK / "verification-record.json"


# ================================================================ a row this run wrote

def backing_problems(row: dict) -> list[str]:
    """Where a row of this run's record differs from the database and the worker's deliveries now.  What
    can no longer change is compared exactly; deliveries may only have grown (a late redelivery claims
    nothing), so the recorded ones must all be there."""
    name, job_id = row["case"], row.get("job_id")
    job = job_row(job_id) if job_id else None
    if job is None:
        return [t("{name}: job {job_id} is not in export_jobs", name=name, job_id=job_id)]
    problems = []
    if job["status"] != row.get("final_status"):
        problems.append(t("{name}: the record's end state is {final_status}, the database says {status}", name=name,
                          final_status=row.get('final_status'), status=job['status']))
    if int(job["attempts"]) != row.get("attempts"):
        problems.append(t("{name}: the record's attempts are {attempts}, the database says {attempts2}", name=name,
                          attempts=row.get('attempts'), attempts2=job['attempts']))
    delivered = deliveries(job_id)
    missing = set(row.get("message_ids") or []) - {d["task_id"] for d in delivered}
    if missing or len(delivered) < (row.get("deliveries") or 0):
        problems.append(t("{name}: the record counts {deliveries} deliveries, the worker ran {n_delivered} (messages "
                          "not among them: {value})", name=name, deliveries=row.get('deliveries'),
                          n_delivered=len(delivered), value=sorted(short(m) for m in missing)))
    committed = [(int(c["seq"]), c["status"], int(c["attempts"])) for c in transitions_of(job_id)]
    recorded = [(c["seq"], c["status"], c["attempts"]) for c in row.get("transitions") or []]
    if committed[:len(recorded)] != recorded:
        problems.append(t("{name}: the recorded state changes are not the ones the database committed", name=name))
    if real_statuses(row.get("observed_states")) != collapse([c[1] for c in recorded]):
        problems.append(t("{name}: observed_states do not match the committed state changes", name=name))
    if row.get("artifact_sha256"):
        try:
            sha = artifact_evidence(job)[0]
        except AssertionError as exc:
            sha = str(exc)
        if sha != row["artifact_sha256"]:
            problems.append(t("{name}: the artifact's sha256 differs from the record", name=name))
    return problems


def real_statuses(states) -> list[str]:
    """The real statuses among observed states, one entry per run."""
    return collapse([s for s in states or [] if s in STATUSES])


def in_order(part: list[str], whole: list[str]) -> bool:
    """Does `part` appear in `whole` in the same order (a poll may miss a state, never add or swap one)?"""
    rest = iter(whole)
    return all(any(s == w for w in rest) for s in part)


# ================================================================ the learner's record

def learner_record() -> tuple[list, str | None]:
    """The learner's case rows, or why there are none to judge."""
    if not LEARNER_RECORD.is_file():
        return [], t("the folder has no verification-record.json")
    try:
        document = json.loads(LEARNER_RECORD.read_text(encoding="utf-8-sig"))  # a Windows editor's BOM is no error
    except ValueError as exc:
        return [], t("verification-record.json is not valid JSON: {exc}", exc=exc)
    rows = rows_of(document)
    return rows, None if rows else t("verification-record.json holds no case rows")


def claimed_cases() -> list[str]:
    """The matrix rows the learner's record marks pass: what 16.1 runs again."""
    return [r["case"] for r in learner_record()[0]
            if isinstance(r, dict) and r.get("result") == "pass" and r.get("case") in CASE_IDS]


def why_not_backed(row) -> str:
    """Why a row that is not marked pass backs no claim (the message names each such row)."""
    if not isinstance(row, dict):
        return t("not a JSON object")
    text = str(row.get("result"))
    if row.get("job_id") is not None and not is_uuid(row["job_id"]):
        text += t(", job_id {job_id!r} is no job id", job_id=row["job_id"])
    return text


def claim_problems(mine: dict, run: dict, versions: set[int]) -> list[str]:
    """Where the learner's pass row says something this run's row for the same case does not show."""
    name, problems = mine["case"], []
    if run["result"] != "pass":
        why = run.get("error") or run["result"]
        return [t("{name}: you marked it pass; run again on your code it did not pass: {why}", name=name, why=why)]
    job = UUID(str(mine["job_id"]))
    if job.variant != UUID(run["job_id"]).variant or job.version not in versions:
        problems.append(t("{name}: job_id {job_id} is not an id your code makes (this run's job ids are "
                          "version-{map} UUIDs): which drill made it?", name=name, job_id=mine['job_id'],
                          map='/'.join(map(str, sorted(versions)))))
    seen = real_statuses(mine.get("observed_states"))
    happened = real_statuses(run["observed_states"])
    if not in_order(seen, happened) or seen[-1:] != happened[-1:]:
        problems.append(t("{name}: the states you recorded, {seen}, are not what this run committed, {happened} (a "
                          "poll may miss a brief state, but the order and the end state must agree)", name=name,
                          seen=seen, happened=happened))
    attempts = mine.get("attempts")
    if attempts is not None and attempts != run["attempts"]:
        problems.append(t("{name}: you recorded attempts {attempts}, this run shows {attempts2}", name=name,
                          attempts=attempts, attempts2=run['attempts']))
    if bool(mine.get("artifact_sha256")) != (run["final_status"] == "succeeded"):
        problems.append(t("{name}: an artifact_sha256 belongs to a succeeded job only (this run ended {final_status})",
                          name=name, final_status=run['final_status']))
    return problems
