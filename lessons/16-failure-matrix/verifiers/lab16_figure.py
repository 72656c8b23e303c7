"""Lesson 16's failure matrix as a table figure (kit module, not a lesson file): a picture of the record
in the HTML report, never part of a verdict (see shared/figures.py)."""

from __future__ import annotations

from lab16_cases import CASE_IDS
from lab16_record import RECORD

from shared.settings import redact
from shared.figures import table
from shared.i18n import t


def matrix_columns() -> list[str]:
    """In this order (tests/figrules_16.py reads them by position): row, fault, expected, result, observed
    states, final status, attempts, deliveries, duplicate deliveries, recovery seconds, evidence."""
    return [t("row"), t("fault"), t("expected"), t("result"),
            t("observed states"), t("final"), "attempts", t("deliveries"),
            t("duplicates"), t("recovery s"), t("evidence")]


def clip(text, limit: int, tail: bool = False) -> str:
    """At most `limit` characters; `tail` keeps the end (where a list of states arrives)."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1):] if tail else text[:limit - 1] + "…"


def states_text(states) -> str:
    return clip("→".join(str(s) for s in states) if isinstance(states, list) and states else "-", 180, tail=True)


def evidence_text(row: dict) -> str:
    bits = []
    if row.get("artifact_sha256"):
        bits.append(f"sha256 {row['artifact_sha256'][:10]}…")
    if row.get("redispatches"):
        bits.append(t("re-dispatched {n_redispatches}×", n_redispatches=len(row['redispatches'])))
    if row.get("time_moved_seconds"):
        bits.append(t("{time_moved_seconds} s moved", time_moved_seconds=row['time_moved_seconds']))
    if row.get("budget_seconds") is not None:
        bits.append(t("budget {budget_seconds:g} s", budget_seconds=row['budget_seconds']))
    if row.get("error"):
        bits.append(redact(str(row["error"])))
    elif row.get("result") == "not_run":
        bits.append(t("not run in this run"))
    return clip(" · ".join(bits) or "-", 190)


def matrix_table(title: str, names: list[str], cases: list[dict], yours: dict[str, dict] | None = None) -> dict:
    """The named matrix rows as the record's `cases` hold them now, in catalogue order: a row this run has
    not run (yet) shows as not_run.  `yours`: the learner's rows (16.1), their states and attempts in two
    last columns."""
    held = {row["case"]: row for row in cases}
    order = [name for name in CASE_IDS if name in names]
    cells = []
    for name in order:
        row = held[name]
        line = [name, clip(f"{row.get('fault_point')}: {row.get('operation')}", 120), clip(row.get("expect"), 120),
                row.get("result"), states_text(row.get("observed_states")), row.get("final_status"),
                row.get("attempts"), row.get("deliveries"), row.get("duplicate_deliveries"),
                row.get("recovery_seconds"), evidence_text(row)]
        if yours is not None:
            mine = yours.get(name) or {}
            line += [states_text(mine.get("observed_states")), clip(mine.get("attempts"), 20)]
        cells.append(line)
    ran = [held[name] for name in order if held[name].get("result") != "not_run"]
    passed = sum(1 for row in ran if row.get("result") == "pass")
    columns = matrix_columns() + ([t("your observed states"), t("your attempts")]
                                  if yours is not None else [])
    caption = t("{n_order} rows, {n_ran} run, {passed} pass; record: {record}", n_order=len(order), n_ran=len(ran),
                passed=passed, record=RECORD)
    failed = [n for n, name in enumerate(order) if held[name].get("result") not in ("pass", "not_run")]
    return table(title, columns, cells, caption=caption, failed=failed)
