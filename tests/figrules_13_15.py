"""What the timeline figures of lessons 13 and 15 must show on the reference's run.

RULES maps a check id to a function that takes the figures that check carried in the report (after
shared.figures.clean: texts may be a str or a {"zh","en"} dict) and asserts the figure's essential
property.  Each rule asks only what the check's verdict already proved (counts, kinds, the order in which
the checker did things or in which one thing caused another), never how long anything took.
"""

from __future__ import annotations

EPS = 1e-3  # clean() rounds times to 0.1 ms; shifting to the origin adds float noise


def text(value) -> str:
    if isinstance(value, dict):
        return str(value.get("en") or value.get("zh") or "")
    return "" if value is None else str(value)


def one(figs: list[dict], kind: str) -> dict:
    found = [f for f in figs if f.get("type") == kind]
    assert len(found) == 1, f"expected one {kind} figure, got {[f.get('type') for f in figs]}"
    return found[0]


def bars(fig: dict, kind: str) -> list[tuple[str, dict]]:
    """(lane name, bar) of this kind, in start order."""
    found = [(text(ln["name"]), b) for ln in fig["lanes"] for b in ln["bars"] if b["kind"] == kind]
    return sorted(found, key=lambda nb: nb[1]["start"])


def marks(fig: dict, kind: str) -> list[tuple[str, dict]]:
    """(lane name, mark) of this kind, in time order."""
    found = [(text(ln["name"]), m) for ln in fig["lanes"] for m in ln["marks"] if m["kind"] == kind]
    return sorted(found, key=lambda nm: nm[1]["at"])


def in_order(*times: float) -> bool:
    return all(a <= b + EPS for a, b in zip(times, times[1:], strict=False))


# ---------------------------------------------------------------- 13

def admission_at_limit(figs: list[dict]) -> None:
    """13.1: queued+running over the check's rows never goes past the limit, and reaches it (one place
    left, exactly one admitted: L-1 + 1)."""
    fig = one(figs, "steps")
    assert fig["limit"] is not None and fig["limit"] >= 1, f"limit {fig['limit']}"
    counts = [y for _, y in fig["points"]]
    assert counts and min(counts) >= 0, counts[:5]
    assert in_order(*(x for x, _ in fig["points"])), "the points are not in time order"
    assert max(counts) <= fig["limit"], f"queued+running reached {max(counts)}, past the limit {fig['limit']}"
    assert max(counts) == fig["limit"], f"queued+running never reached the limit {fig['limit']}: {max(counts)}"


def fast_while_bulk_busy(figs: list[dict]) -> None:
    """13.5: the short job ran on the fast@ worker, inside the span of a long job held on the bulk@ worker."""
    fig = one(figs, "lanes")
    fast, bulk = bars(fig, "fast"), bars(fig, "bulk")
    assert fast, "no bar of the short job"
    assert all(name.startswith("fast@") for name, _ in fast), [name for name, _ in fast]
    held = [b for name, b in bulk if name.startswith("bulk@")]
    assert held, f"no long job on the bulk@ worker: {[name for name, _ in bulk]}"
    assert any(in_order(b["start"], f["start"]) and in_order(f["end"], b["end"]) for _, f in fast for b in held), \
        f"the short job's bar is not inside a long job's: fast {[f for _, f in fast]}, bulk {held}"


# ---------------------------------------------------------------- 15

def lease_expiry_to_claim(figs: list[dict]) -> None:
    """15.2: claim 1, SIGKILL, the lease ends (moved), the scan requeues and writes a new event, the backoff
    starts there, and the second claim comes after the lease ended; the job ends succeeded."""
    fig = one(figs, "lanes")
    leases, waits = bars(fig, "lease"), bars(fig, "wait")
    claims, killed, retries = marks(fig, "claim"), marks(fig, "killed"), marks(fig, "retry")
    assert len(leases) == 2 and len(waits) == 1, f"leases {leases}, waits {waits}"
    assert len(claims) == 2 and len(killed) == 1 and len(retries) == 1, f"{claims}, {killed}, {retries}"
    lease1, wait, retry = leases[0][1], waits[0][1], retries[0][1]
    assert in_order(claims[0][1]["at"], killed[0][1]["at"], lease1["end"], retry["at"], wait["start"], wait["end"]), \
        f"claim {claims[0][1]}, kill {killed[0][1]}, lease {lease1}, scan {retry}, backoff {wait}"
    assert any(abs(m["at"] - retry["at"]) <= EPS for _, m in marks(fig, "event")), "no new event at the scan"
    assert in_order(lease1["end"], claims[1][1]["at"]), f"the second claim {claims[1][1]} before the lease ended"
    assert marks(fig, "ok"), "the recovered job's success is not drawn"


def dead_letter_then_replay(figs: list[dict]) -> None:
    """15.3: one dead letter on the failed job's lane; the replay on a lane of its own, after it, and the
    replay runs to success there."""
    fig = one(figs, "lanes")
    dead, replay = marks(fig, "dead"), marks(fig, "replay")
    assert len(dead) == 1 and len(replay) == 1, f"dead {dead}, replay {replay}"
    (old, letter), (new, made) = dead[0], replay[0]
    assert old != new, f"the replay is drawn on the failed job's lane {old!r}"
    assert in_order(letter["at"], made["at"]), f"the replay {made} before the dead letter {letter}"
    assert any(name == new and in_order(made["at"], m["at"]) for name, m in marks(fig, "ok")), \
        "the replay's success is not drawn on its lane"


def exhausted_then_dead(figs: list[dict]) -> None:
    """15.8: three claims, each lease ended before its scan; twice queued again, then one dead letter after
    the third lease."""
    fig = one(figs, "lanes")
    leases, claims = bars(fig, "lease"), marks(fig, "claim")
    retries, failed, dead = marks(fig, "retry"), marks(fig, "fail"), marks(fig, "dead")
    assert len(leases) == 3 and len(claims) == 3, f"leases {leases}, claims {claims}"
    assert len(retries) == 2 and len(failed) == 1 and len(dead) == 1, f"{retries}, {failed}, {dead}"
    scans = [m for _, m in retries] + [failed[0][1]]
    for (_, lease), (_, claim), scanned in zip(leases, claims, scans, strict=True):
        assert in_order(claim["at"], lease["end"], scanned["at"]), (claim, lease, scanned)
    assert in_order(leases[-1][1]["end"], dead[0][1]["at"]) and in_order(retries[-1][1]["at"], dead[0][1]["at"])


RULES = {
    "13.1": admission_at_limit,
    "13.5": fast_while_bulk_busy,
    "15.2": lease_expiry_to_claim,
    "15.3": dead_letter_then_replay,
    "15.8": exhausted_then_dead,
}
