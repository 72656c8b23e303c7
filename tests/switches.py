"""Switches of the kit's own test suite (LAB_TEST_*; README "Names"): set by a maintainer, never by a run.

LAB_TEST_ALL=1 and LAB_TEST_DAY are read in tests/daily.py; LAB_TEST_SLOT in tests/conftest.py."""

from __future__ import annotations

import os
import sys


def curriculum() -> str | None:
    """LAB_TEST_CURRICULUM: the course's curriculum.json, for the tests that type a folder from it (opt-in).
    The old spelling TASKLAB_CURRICULUM still works, with a one-line notice."""
    value = os.environ.get("LAB_TEST_CURRICULUM")
    if not value and os.environ.get("TASKLAB_CURRICULUM"):
        print("notice: TASKLAB_CURRICULUM is now called LAB_TEST_CURRICULUM", file=sys.stderr)
        return os.environ["TASKLAB_CURRICULUM"]
    return value
