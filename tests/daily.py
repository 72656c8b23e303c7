"""What `make test` samples and `make test-all` runs whole.

A few lists are long and their every item proved often enough when it takes its turn: the checks run
alone, the mutants beyond the ones that prove every check can fail, the lessons graded as finished.
`make test` runs today's share of each (the share moves with the date, so every item comes round within
a few days and CI on one day runs one fixed set); `make test-all` sets LAB_TEST_ALL=1 and runs them all.
The day is printed at the start of every run; `make test DAY=YYYY-MM-DD` (LAB_TEST_DAY) runs that day's share
again.
"""

import datetime
import os

EVERYTHING = os.environ.get("LAB_TEST_ALL") == "1"


def day() -> datetime.date:
    """The day whose share runs: LAB_TEST_DAY=YYYY-MM-DD replays one, else today."""
    chosen = os.environ.get("LAB_TEST_DAY", "").strip()
    if not chosen:
        return datetime.date.today()
    try:
        return datetime.date.fromisoformat(chosen)
    except ValueError:
        raise SystemExit(f"LAB_TEST_DAY={chosen!r}: give a date as YYYY-MM-DD (make test DAY=2026-12-05)") from None


def today() -> int:
    return day().toordinal()


def header() -> str:
    if EVERYTHING:
        return "daily share: everything (LAB_TEST_ALL=1)"
    return f"daily share: {day().isoformat()} (run this share again: make test DAY={day().isoformat()})"


def share(items: list, every: int) -> list:
    """Today's share: each item runs one day in `every` (all of them under make test-all)."""
    if EVERYTHING:
        return list(items)
    return [item for n, item in enumerate(items) if n % every == today() % every]
