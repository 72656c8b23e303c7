"""What the timeline figures of lessons 09 and 10 must show on the reference's run.

RULES maps a check id to a function that takes the figures that check carried in the report (after
shared.figures.clean: texts may be a str or a {"zh","en"} dict) and asserts the figure's essential
property.  Each rule asks only what the check's verdict already proved (counts, kinds, causal order),
never how long anything took.
"""

from __future__ import annotations

import re

EPS = 1e-3  # clean() rounds times to 0.1 ms; shifting to the origin adds float noise


def text(value) -> str:
    if isinstance(value, dict):
        return str(value.get("en") or value.get("zh") or "")
    return "" if value is None else str(value)


def one_lanes(figs: list[dict]) -> dict:
    found = [f for f in figs if f.get("type") == "lanes"]
    assert len(found) == 1, f"expected one lanes figure, got {[f.get('type') for f in figs]}"
    return found[0]


# ---------------------------------------------------------------- 09

def killed_then_redelivered(figs: list[dict]) -> None:
    """09.4: a SIGKILL mark in one child's lane, the killed execution there, and a later execution of the
    same message in another child's lane."""
    fig = one_lanes(figs)
    killed = [(i, m) for i, ln in enumerate(fig["lanes"]) for m in ln["marks"] if m["kind"] == "killed"]
    assert len(killed) == 1, f"expected one killed mark, got {killed}"
    where, kill = killed[0]
    victims = [b for b in fig["lanes"][where]["bars"] if b["start"] <= kill["at"] + EPS]
    assert victims, "no execution in the killed child's lane before the SIGKILL"
    job = text(victims[0]["label"]).split()[0]
    later = [b for i, ln in enumerate(fig["lanes"]) if i != where for b in ln["bars"]
             if b["start"] >= kill["at"] - EPS and text(b["label"]).split()[:1] == [job]]
    assert later, f"no later execution of {job} in another lane: {fig['lanes']}"
    assert any(b["kind"] in ("retry", "ok") for b in later), f"the redelivered execution's kind: {later}"


# ---------------------------------------------------------------- 10

def attempts(fig: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """(attempt bars in start order, wait bars, read marks) of the job's one lane."""
    assert len(fig["lanes"]) == 1, f"expected one lane (the job), got {len(fig['lanes'])}"
    ln = fig["lanes"][0]
    tried = sorted((b for b in ln["bars"] if text(b["label"]).startswith("attempt ")), key=lambda b: b["start"])
    waits = [b for b in ln["bars"] if b["kind"] == "wait"]
    reads = [m for m in ln["marks"] if text(m["label"]) == "read"]
    return tried, waits, reads


def expect_attempts(figs: list[dict], kinds: list[str], reads: int | None) -> tuple[dict, list[dict]]:
    fig = one_lanes(figs)
    tried, waits, read_marks = attempts(fig)
    assert [b["kind"] for b in tried] == kinds, f"attempt bars {[(text(b['label']), b['kind']) for b in tried]}"
    assert [text(b["label"]).split(":")[0] for b in tried] == [f"attempt {n}" for n in range(len(kinds))]
    if reads is not None:
        assert len(read_marks) == reads, f"expected {reads} read marks, got {len(read_marks)}"
    return fig, waits


def deadline_lines(fig: dict) -> list[dict]:
    return [m for m in fig["lines"] if m["kind"] == "deadline"]


def recovers(figs: list[dict]) -> None:
    """10.1: attempts 0, 1 failed and 2 succeeded; two planned waits."""
    _, waits = expect_attempts(figs, ["fail", "fail", "ok"], None)
    assert len(waits) == 2, f"expected 2 planned waits, got {len(waits)}"


def expired(figs: list[dict]) -> None:
    """10.2: one failed attempt, no read, no wait, and the (past) deadline drawn before it started."""
    fig, waits = expect_attempts(figs, ["fail"], 0)
    assert not waits
    lines = deadline_lines(fig)
    assert lines and lines[0]["at"] <= fig["lanes"][0]["bars"][0]["start"] + EPS, f"deadline line: {fig['lines']}"


def permanent(figs: list[dict]) -> None:
    """10.3: one failed attempt with one read, no wait."""
    _, waits = expect_attempts(figs, ["fail"], 1)
    assert not waits


def limit(figs: list[dict]) -> None:
    """10.4: attempts 0..3 all failed, each with a read; the last ends in FAILURE; three planned waits."""
    fig, waits = expect_attempts(figs, ["fail"] * 4, 4)
    tried, _, _ = attempts(fig)
    assert "FAILURE" in text(tried[-1]["label"]), text(tried[-1]["label"])
    assert len(waits) == 3, f"expected 3 planned waits, got {len(waits)}"


def delays(figs: list[dict]) -> None:
    """10.5: the job and its twin (the jitter's proof), each with at least one planned wait; each labelled
    within its cap, and drawn as long as planned."""
    assert [fig.get("type") for fig in figs] == ["lanes", "lanes"], [fig.get("type") for fig in figs]
    for fig in figs:
        _, waits, _ = attempts(fig)
        assert waits, "no wait bar"
        for b in waits:
            found = re.fullmatch(r"wait ([0-9.]+)s ≤ cap ([0-9.e+-]+)s", text(b["label"]))
            assert found, f"wait label {text(b['label'])!r}"
            planned, cap = float(found[1]), float(found[2])
            assert 0 <= planned <= cap
            assert abs((b["end"] - b["start"]) - planned) <= EPS + 0.0005, (b, planned)


def budget(figs: list[dict]) -> None:
    """10.6: one failed attempt with one read, no wait, and the deadline as the task's clock saw it drawn
    after the attempt started (the probe sets it after the read)."""
    fig, waits = expect_attempts(figs, ["fail"], 1)
    assert not waits
    lines = deadline_lines(fig)
    assert lines and lines[0]["at"] >= fig["lanes"][0]["bars"][0]["start"] - EPS, f"deadline line: {fig['lines']}"


RULES = {
    "09.4": killed_then_redelivered,
    "10.1": recovers,
    "10.2": expired,
    "10.3": permanent,
    "10.4": limit,
    "10.5": delays,
    "10.6": budget,
}
