"""What lesson 16's figures must show on the reference's real run (called from tests/test_lessons.py).

RULES maps a check id to a function given the figures that check carried in the report (after
shared.figures.clean: a title, caption or cell may be a str or a {"zh","en"} dict) which asserts the
figure's essential property.  Figures are pictures, never verdicts: these rules only say the picture
is the one the check means to draw.

Every matrix table's columns are, by position (lab16_verify.matrix_columns): row, fault, expected,
result, observed states, final, attempts, deliveries, duplicates, recovery s, evidence — and 16.1's two
more, the learner's own observed states and attempts.  Which rows a check runs comes from the lesson's own
definition (lab16_verify.ROWS_FOR; for 16.1 the rows the reference's verification-record.json marks
pass); which of them ran is what the figure itself says (its result column and its caption).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LESSON = Path(__file__).resolve().parents[1] / "lessons" / "16-failure-matrix"
VERIFIERS = LESSON / "verifiers"
ROW, RESULT, STATES, FINAL, ATTEMPTS, DELIVERIES, DUPLICATES, RECOVERY, EVIDENCE = 0, 3, 4, 5, 6, 7, 8, 9, 10
YOUR_STATES, YOUR_ATTEMPTS = 11, 12  # 16.1 only
COLUMNS = 11


def _lesson():
    """The verifier module (imported lazily: loading these rules costs nothing)."""
    if str(VERIFIERS) not in sys.path:
        sys.path.insert(0, str(VERIFIERS))
    import lab16_verify
    return lab16_verify


def _text(value) -> str:
    if isinstance(value, dict):
        return str(value.get("en") or value.get("zh") or "")
    return "" if value is None else str(value)


def _matrix(figs: list[dict], check: str) -> tuple[list[str], list[list[str]], str]:
    tables = [f for f in figs if f.get("type") == "table"]
    assert len(tables) == 1, f"{check}: expected one matrix table, got {[f.get('type') for f in figs]}"
    fig = tables[0]
    columns = [_text(c) for c in fig["columns"]]
    rows = [[_text(v) for v in row] for row in fig["rows"]]
    assert len(columns) >= COLUMNS and all(len(row) == len(columns) for row in rows), (check, columns)
    return columns, rows, _text(fig.get("caption"))


def _judge(check: str, figs: list[dict], wanted: list[str], yours: bool = False) -> None:
    lesson = _lesson()
    from lab16_record import STATUSES
    columns, rows, caption = _matrix(figs, check)
    assert len(columns) == COLUMNS + (2 if yours else 0), (check, columns)
    names = [row[ROW] for row in rows]
    # One row per matrix row the check names, in the catalogue's order.
    order = [name for name in lesson.CASE_IDS if name in wanted]
    assert names == order, f"{check}: table rows {names} != the check's rows {order}"
    # What the figure says ran: its result column, and its caption's counts (rows, run, pass) agree.
    ran = [row for row in rows if row[RESULT] != "not_run"]
    passed = [row for row in ran if row[RESULT] == "pass"]
    counts = [int(n) for n in re.findall(r"\d+", caption)[:3]]
    assert counts == [len(rows), len(ran), len(passed)], f"{check}: caption {caption!r} vs the table"
    # On the reference every row the check names ran and passed, and each row agrees with itself.
    assert len(ran) == len(rows), f"{check}: rows not run: {[r[ROW] for r in rows if r not in ran]}"
    for row in rows:
        name = row[ROW]
        assert row[RESULT] == "pass", f"{check}: {name} is {row[RESULT]}: {row[EVIDENCE]}"
        real = [s for s in row[STATES].split("→") if s in STATUSES]
        assert real and real[-1] == row[FINAL], f"{check}: {name}: observed {row[STATES]!r} ends not at {row[FINAL]!r}"
        assert int(row[DUPLICATES]) == max(0, int(row[DELIVERIES]) - int(row[ATTEMPTS])), (check, name, row)
        assert float(row[RECOVERY]) >= 0, (check, name, row[RECOVERY])
        if yours:  # the learner's states end where this run's job ended; attempts, when recorded, agree
            mine = [s for s in row[YOUR_STATES].split("→") if s in STATUSES]
            assert mine and mine[-1] == row[FINAL], (check, name, row[YOUR_STATES], row[FINAL])
            assert row[YOUR_ATTEMPTS] in ("", row[ATTEMPTS]), (check, name, row[YOUR_ATTEMPTS], row[ATTEMPTS])


def _rows_of_check(check: str):
    def rule(figs: list[dict]) -> None:
        _judge(check, figs, _lesson().ROWS_FOR[check])
    return rule


def _record_rule(figs: list[dict]) -> None:
    """16.1 re-runs the rows the learner's (here: the reference's) verification-record.json marks pass."""
    lesson = _lesson()
    from lab16_record import rows_of
    document = json.loads((LESSON / "verification-record.json").read_text(encoding="utf-8"))
    claimed = [r["case"] for r in rows_of(document)
               if isinstance(r, dict) and r.get("result") == "pass" and r.get("case") in lesson.CASE_IDS]
    assert claimed, "the reference's verification-record.json marks no row pass"
    _judge("16.1", figs, claimed, yours=True)


RULES: dict[str, callable] = {
    "16.1": _record_rule,
    "16.3": _rows_of_check("16.3"),
    "16.4": _rows_of_check("16.4"),
    "16.8": _rows_of_check("16.8"),
    "16.9": _rows_of_check("16.9"),
}
