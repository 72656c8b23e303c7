"""What lesson 16's checks share in one verifier run (judge-side kit module, not a lesson file): the matrix's
stack and the matrix run on it (Shared), and how a check shows its rows: one line per row (describe) and their
table as a figure (run_rows).
"""

from __future__ import annotations

import os

from lab16_failure_matrix import Matrix
from lab16_evidence import claimed_cases
from lab16_figure import matrix_table
from lab16_fixture import Stack

from shared.events import short
from shared.settings import redact
from shared.figures import attach
from shared.i18n import t


class Shared:
    """The Stack (broker, workers) and the matrix run on it: made once per verifier run."""

    stack: Stack | None = None
    stack_error: str | None = None
    matrix: Matrix | None = None

    @classmethod
    def prepare(cls, rows_for: dict[str, list[str]], needs_stack: set[str]) -> None:
        """Start the stack before the first check, when a selected check needs it: starting workers is set-up,
        not part of any one check.  A stack that cannot start fails each check that needs it, with why.
        `rows_for`: the matrix rows each check runs (16.1's, the rows the learner's record marks pass, are
        added here); `needs_stack`: the checks that need the stack whatever the record says."""
        raw = os.environ.get("TASKLAB_CHECKS")  # the checks this run was asked for; none named: all
        chosen = set(raw.split(",")) if raw else None
        wanted = dict(rows_for, **{"16.1": claimed_cases()})
        if chosen is not None and not chosen & needs_stack and not (("16.1" in chosen) and wanted["16.1"]):
            return
        rows = {row for check, names in wanted.items() if chosen is None or check in chosen for row in names}
        stack = Stack(cache_worker="result_cache_expired" in rows)
        try:
            stack.start()
        except AssertionError as exc:
            stack.stop()
            cls.stack_error = t("cannot start the failure-matrix environment: ") + redact(str(exc))
            return
        cls.stack, cls.matrix = stack, Matrix(stack)

    @classmethod
    def get_stack(cls) -> Stack:
        if cls.stack is None:
            raise AssertionError(cls.stack_error or t("the failure-matrix environment was not started"))
        return cls.stack

    @classmethod
    def rows(cls, names: list[str]) -> dict[str, dict]:
        """The matrix rows named, run now unless this verifier run has run them already."""
        cls.get_stack()
        record = cls.matrix.run(names)
        return {row["case"]: row for row in record["cases"] if row["case"] in names}

    @classmethod
    def stop(cls) -> None:
        if cls.stack is not None:
            cls.stack.stop()


def describe(row: dict) -> str:
    states = "→".join(row.get("observed_states") or []) or "-"
    sha = (row.get("artifact_sha256") or "")[:10]
    job = short(row["job_id"]) if row.get("job_id") else "-"
    text = t("{result:<5} {case}: job {job} [{states}] deliveries {deliveries} (dup {duplicate_deliveries}) attempts "
             "{attempts} recovery {recovery_seconds} s", result=row['result'], case=row['case'], job=job,
             states=states, deliveries=row.get('deliveries'), duplicate_deliveries=row.get('duplicate_deliveries'),
             attempts=row.get('attempts'), recovery_seconds=row.get('recovery_seconds'))
    if row.get("time_moved_seconds"):
        text += t(" (of which {time_moved_seconds} s moved)", time_moved_seconds=row['time_moved_seconds'])
    if row.get("redispatches"):
        text += t("; re-dispatched {n_redispatches}×", n_redispatches=len(row['redispatches']))
    if sha:
        text += f" sha256 {sha}…"
    return text


def run_rows(c, names: list[str], title: str, yours: dict[str, dict] | None = None) -> dict[str, dict]:
    """Shared.rows, with the rows' table attached to the check however the run ends (before any assert)."""
    try:
        return Shared.rows(names)
    finally:
        attach(c, lambda: matrix_table(title, names, Shared.matrix.record()["cases"], yours))
