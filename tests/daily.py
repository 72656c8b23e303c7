"""What `make test` samples and `make test-all` runs whole.

A few lists are long and their every item proved often enough when it takes its turn: the checks run
alone, the mutants beyond the ones that prove every check can fail, the lessons graded as finished.
`make test` runs today's share of each (the share moves with the date, so every item comes round within
a few days and CI on one day runs one fixed set); `make test-all` sets LAB_TEST_ALL=1 and runs them all.
"""

import datetime
import os

EVERYTHING = os.environ.get("LAB_TEST_ALL") == "1"


def today() -> int:
    return datetime.date.today().toordinal()


def share(items: list, every: int) -> list:
    """Today's share: each item runs one day in `every` (all of them under make test-all)."""
    if EVERYTHING:
        return list(items)
    return [item for n, item in enumerate(items) if n % every == today() % every]
