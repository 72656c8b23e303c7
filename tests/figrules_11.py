"""What the timeline figure of lesson 11 must show on the reference's run (see tests/figrules_09_10.py)."""

from __future__ import annotations

from tests.figrules_09_10 import one_lanes


def one_claimer_got_the_job(figs: list[dict]) -> None:
    """11.2: the first round's nine claimers as lanes, each one's claim a bar, exactly one token mark."""
    fig = one_lanes(figs)
    assert len(fig["lanes"]) == 9, [ln["name"] for ln in fig["lanes"]]
    assert all(len(ln["bars"]) == 1 for ln in fig["lanes"])
    tokens = [m for ln in fig["lanes"] for m in ln["marks"] if m["kind"] == "ok"]
    assert len(tokens) == 1, f"expected one token mark, got {tokens}"


RULES = {"11.2": one_claimer_got_the_job}
