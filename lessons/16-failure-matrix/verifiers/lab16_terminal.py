"""Lesson 16's terminal verification, 16.2 (judge-side kit module, not a lesson file): the jobs
`python verify_terminal.py <job_id>` is asked about.  Besides the job the worker really ran, five rows are
forged into export_jobs with the files their result_ref names."""

from __future__ import annotations

import json
from uuid import uuid4

from shared.settings import WORK
from shared.i18n import t
from shared.lesson_db import sql


def forge(status: str, payload, result_ref: str | None, cancel: bool = False) -> str:
    """A job row written straight into export_jobs, as a run could have left it: its id."""
    job_id = str(uuid4())
    sql("INSERT INTO export_jobs (id, status, payload, attempts, deadline_at, result_ref, cancel_requested) "
        "VALUES (%s, %s, %s, 1, DATE_ADD(NOW(6), INTERVAL 10 MINUTE), %s, %s)",
        (job_id, status, json.dumps(payload, ensure_ascii=False), result_ref, cancel))
    return job_id


def reordered(payload: list[dict]) -> str:
    """The same JSON values, written differently: keys reversed, indented, non-ASCII escaped."""
    return json.dumps([dict(reversed(list(row.items()))) for row in payload], indent=3, ensure_ascii=True)


def terminal_cases(job: str, payload: list[dict]) -> list[tuple[str, str, bool, str | None]]:
    """(label, job id, should it pass, what it must print) for each job verify_terminal.py is asked about:
    the real `job` first, then the forged rows, their files written now."""
    folder = WORK / "artifacts"
    folder.mkdir(exist_ok=True)

    cases = []
    same = folder / f"lab16-{uuid4().hex[:8]}-same-values.json"
    same.write_text(reordered(payload), encoding="utf-8")
    cases.append((t("the real job"), job, True, "artifact verified"))
    cases.append((t("other key order and spacing, same values"),
                  forge("succeeded", payload, f"artifacts/{same.name}"), True, "artifact verified"))
    changed = json.loads(json.dumps(payload))
    changed[0]["price_cents"] = int(changed[0]["price_cents"]) + 1
    wrong = folder / f"lab16-{uuid4().hex[:8]}-other-values.json"
    wrong.write_text(json.dumps(changed, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    cases.append((t("one price differs in the file"),
                  forge("succeeded", payload, f"artifacts/{wrong.name}"), False, None))
    escape = WORK / f"lab16-{uuid4().hex[:8]}-escaped.json"
    escape.write_text(json.dumps(payload, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    cases.append((t("result_ref escapes artifacts (artifacts/../)"),
                  forge("succeeded", payload, f"artifacts/../{escape.name}"), False, None))
    cases.append((t("failed without result_ref"),
                  forge("failed", payload, None), True, "terminal without published artifact"))
    cases.append((t("cancelled yet holding a result_ref"),
                  forge("cancelled", payload, f"artifacts/{same.name}", cancel=True), False, None))
    return cases
