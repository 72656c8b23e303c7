"""The daily share of the long lists is replayable: LAB_TEST_DAY (make test DAY=) picks the day."""

import datetime

import pytest

from tests import daily


def test_a_given_day_picks_that_days_share(monkeypatch):
    monkeypatch.setattr(daily, "EVERYTHING", False)
    monkeypatch.setenv("LAB_TEST_DAY", "2026-12-01")
    first = daily.share(list(range(12)), every=4)
    assert daily.day() == datetime.date(2026, 12, 1) and "make test DAY=2026-12-01" in daily.header()
    monkeypatch.setenv("LAB_TEST_DAY", "2026-12-02")
    assert daily.share(list(range(12)), every=4) != first
    monkeypatch.setenv("LAB_TEST_DAY", "2026-12-05")
    assert daily.share(list(range(12)), every=4) == first  # four days later, the same share


def test_a_day_that_is_not_a_date_is_refused_with_the_form_to_use(monkeypatch):
    monkeypatch.setenv("LAB_TEST_DAY", "yesterday")
    with pytest.raises(SystemExit, match="YYYY-MM-DD"):
        daily.day()
