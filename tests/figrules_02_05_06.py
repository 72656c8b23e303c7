"""What the figures of lessons 02, 05 and 06 must show on the reference's real run.

RULES maps a check id to a function taking the figures that check carried in the report (after
shared.figures.clean: titles and labels may be str or {"zh","en"}); it asserts the figure's essential
property.  Only what the check's own verdict already guarantees is asserted: no speed, no durations --
an order of events, a ceiling the verdict proved, the presence of what the run recorded.
"""

from __future__ import annotations



def _text(value) -> str:
    if isinstance(value, dict):
        return value.get("en") or value.get("zh") or ""
    return "" if value is None else str(value)


def _lanes(figs: list[dict]) -> list[dict]:
    found = [f for f in figs if f.get("type") == "lanes"]
    assert found, f"no lanes figure among {[f.get('type') for f in figs]}"
    return found


def _bars(fig: dict, kind: str) -> list[dict]:
    return [b for ln in fig["lanes"] for b in ln["bars"] if b["kind"] == kind]


def _marks(fig: dict, kind: str) -> list[dict]:
    return [m for ln in fig["lanes"] for m in ln["marks"] if m["kind"] == kind]


def _overlap(bars: list[dict]) -> int:
    """The most bars open at one instant.  A bar is [start, end): at equal times ends are taken first, so
    bars that merely touch (one ends as the next starts, or rounding made them equal) do not overlap."""
    events = sorted([(b["start"], 1) for b in bars if b["end"] > b["start"]]
                    + [(b["end"], -1) for b in bars if b["end"] > b["start"]])
    most = now = 0
    index = 0
    while index < len(events):
        at = events[index][0]
        while index < len(events) and events[index][0] == at:
            now += events[index][1]
            index += 1
        most = max(most, now)
    return most


# ---------------------------------------------------------------- lesson 02

def _consumer_lanes(figs: list[dict]) -> dict:
    """The lanes figure of the consumers: its "hold" bars are reads running inside a permit."""
    fig = next((f for f in _lanes(figs) if _bars(f, "hold") or _marks(f, "fail")), None)
    assert fig is not None, "no lanes figure with hold bars"
    assert fig["lanes"], "no lanes"
    return fig


def rule_02_2(figs: list[dict]) -> None:
    fig = _consumer_lanes(figs)
    holds = _bars(fig, "hold")
    assert len(fig["lanes"]) == 4, f"expected one lane per consumer (4), got {len(fig['lanes'])}"
    assert len(holds) == 20, f"expected a hold bar per read (20), got {len(holds)}"
    assert _overlap(holds) == 2, f"hold bars overlapping at most: {_overlap(holds)} (the verdict proved exactly 2)"
    for ln in fig["lanes"]:  # a consumer reads one product at a time
        assert _overlap(ln["bars"]) <= 1, f"{_text(ln['name'])}: its own reads overlap"
    counts = [f for f in figs if f.get("type") == "steps"]
    if counts:
        assert counts[0]["limit"] == 2, counts[0]["limit"]
        assert max(y for _, y in counts[0]["points"]) == 2, "the running count should reach 2, never more"


def rule_02_3(figs: list[dict]) -> None:
    fig = _consumer_lanes(figs)
    deadlines = [m for m in fig["lines"] if m["kind"] == "deadline"]
    assert len(deadlines) == 1, f"expected one deadline line, got {fig['lines']}"
    cancels = _marks(fig, "cancel")
    assert cancels, "no cancel mark: the budget cancelled nothing?"
    # Every consumer task was cancelled (the verdict: batch timed out, every consumer cleaned up).
    assert all(any(m["kind"] == "cancel" for m in ln["marks"]) for ln in fig["lanes"]), \
        "a consumer lane without its cancel mark"
    due = deadlines[0]["at"]
    assert all(m["at"] >= due - 0.001 for m in cancels), "a cancel mark before the budget was due"
    assert _overlap(_bars(fig, "hold")) <= 2


def rule_02_4(figs: list[dict]) -> None:
    fig = _consumer_lanes(figs)
    fails = _marks(fig, "fail")
    assert any("ValueError" in _text(m["label"]) for m in fails), f"no ValueError mark among {fails}"
    assert _marks(fig, "cancel"), "no cancel mark: the TaskGroup cancelled no sibling?"


# ---------------------------------------------------------------- lesson 05

def _pool_io(figs: list[dict]) -> tuple[dict, dict, list[dict]]:
    """pool_io.py's timeline: the main thread's lane, and the worker threads' lanes (those with run bars)."""
    fig = _lanes(figs)[0]
    main = fig["lanes"][0]
    workers = [ln for ln in fig["lanes"] if any(b["kind"] == "run" for b in ln["bars"])]
    assert workers, "no worker lane with a job's run bar"
    return fig, main, workers


def _running_at_timeout(figs: list[dict]) -> tuple[dict, dict, dict]:
    fig, main, workers = _pool_io(figs)
    deadlines = [m for m in fig["lines"] if m["kind"] == "deadline"]
    assert deadlines, "no deadline line where result(timeout=...) gave up"
    due = deadlines[0]["at"]
    job = next((b for ln in workers for b in ln["bars"] if b["kind"] == "run" and b["start"] <= due), None)
    assert job is not None, "no job bar that had started when the wait gave up"
    return fig, main, job


def rule_05_1(figs: list[dict]) -> None:
    fig, main, job = _running_at_timeout(figs)
    due = next(m["at"] for m in fig["lines"] if m["kind"] == "deadline")
    assert any(b["kind"] == "wait" for b in main["bars"]), "no result() wait bar on the main thread"
    running = [m for m in main["marks"] if m["kind"] == "cancel" and "(running) -> False" in _text(m["label"])]
    assert running and running[0]["at"] >= due, f"no cancel() -> False mark after the timeout: {main['marks']}"
    assert job["end"] >= running[0]["at"], "the job should still run when cancel() returned False"


def rule_05_2(figs: list[dict]) -> None:
    fig, main, job = _running_at_timeout(figs)
    sets = [m for m in main["marks"] if _text(m["label"]) == "stop.set()"]
    assert sets, "no stop.set() mark"
    assert job["end"] >= sets[0]["at"], "the stopped job ended before stop.set()"
    closed = [m for m in main["marks"] if _text(m["label"]) == "pool closed"]
    assert closed, "no pool closed mark"
    ends = [b["end"] for ln in fig["lanes"] for b in ln["bars"] if b["kind"] == "run"]
    assert all(end <= closed[0]["at"] for end in ends), "a job ended after pool closed was printed"
    after = [m for ln in fig["lanes"] for m in ln["marks"]
             if m["kind"] == "sleep" and _text(m["label"]) in ("slice after stop", "停止后的一段")]
    assert len(after) <= 1, f"{len(after)} slices began after stop"


def rule_05_5(figs: list[dict]) -> None:
    fig, main, _ = _pool_io(figs)
    cancels = [_text(m["label"]) for m in main["marks"] if m["kind"] == "cancel"]
    assert any("(pending) -> True" in label for label in cancels), f"no queued cancel() -> True: {cancels}"
    assert any("(running) -> False" in label for label in cancels), f"no running cancel() -> False: {cancels}"
    withdrawn = next(label.split()[1] for label in cancels if "(pending) -> True" in label)  # "#2"
    ran = [b for ln in fig["lanes"] for b in ln["bars"]
           if b["kind"] == "run" and _text(b["label"]) == f"job {withdrawn}"]
    assert not ran, f"the withdrawn job {withdrawn} has a run bar"
    queued = [b for ln in fig["lanes"] for b in ln["bars"] if b["kind"] == "queued" and _text(b["label"]) == withdrawn]
    assert queued, f"no queued bar for {withdrawn}"


def rule_05_3(figs: list[dict]) -> None:
    fig = _lanes(figs)[0]
    reads = _bars(fig, "pool")
    assert len(reads) == 8, f"expected a pool bar per read (8), got {len(reads)}"
    assert 1 <= len([ln for ln in fig["lanes"] if ln["bars"]]) <= 2, "more worker lanes than max_workers=2"
    assert _overlap(reads) <= 2, f"{_overlap(reads)} reads overlap (the verdict proved at most 2)"
    for ln in fig["lanes"]:
        assert _overlap(ln["bars"]) <= 1, f"{_text(ln['name'])}: a thread ran two reads at once"
    counts = [f for f in figs if f.get("type") == "steps"]
    assert counts, "no futures-outstanding figure"
    assert counts[0]["limit"] == 4
    assert 1 <= max(y for _, y in counts[0]["points"]) <= 4, "futures outstanding above the batch of 4"


# ---------------------------------------------------------------- lesson 06

def _serial_and_pool(fig: dict, calls: int | None = None) -> None:
    serial, pool = _bars(fig, "serial"), _bars(fig, "pool")
    assert serial and pool, f"expected serial and pool bars, got {len(serial)} and {len(pool)}"
    assert len(serial) == len(pool), f"serial calls {len(serial)} != pool calls {len(pool)} (same inputs)"
    if calls is not None:
        assert len(serial) == calls, f"expected {calls} calls a side, got {len(serial)}"
    assert _overlap(serial) <= 1, "serial calls overlap: they run one after another"
    workers = [ln for ln in fig["lanes"] if any(b["kind"] == "pool" for b in ln["bars"])]
    assert 1 <= len(workers) <= 2, f"{len(workers)} worker lanes for max_workers=2"
    for ln in workers:  # a worker process runs one call at a time
        assert _overlap(ln["bars"]) <= 1, f"{_text(ln['name'])}: two calls at once in one process"
    # The pool's work begins once the serial part is done (the script does them in this order).
    assert min(b["start"] for b in pool) >= max(b["end"] for b in serial), "a pool call before the serial part ended"


def rule_06_3(figs: list[dict]) -> None:
    _serial_and_pool(_lanes(figs)[0], calls=4)


def rule_06_6(figs: list[dict]) -> None:
    found = _lanes(figs)
    assert len(found) == 2, f"expected a figure for each run (rounds 2000 and 10), got {len(found)}"
    rounds = set()
    for fig in found:
        _serial_and_pool(fig, calls=4)
        rounds |= {_text(b["label"]) for b in _bars(fig, "serial") + _bars(fig, "pool")}
    assert rounds == {"rounds=2000", "rounds=10"}, rounds


RULES: dict[str, callable] = {
    "02.2": rule_02_2,
    "02.3": rule_02_3,
    "02.4": rule_02_4,
    "05.1": rule_05_1,
    "05.2": rule_05_2,
    "05.3": rule_05_3,
    "05.5": rule_05_5,
    "06.3": rule_06_3,
    "06.6": rule_06_6,
}
