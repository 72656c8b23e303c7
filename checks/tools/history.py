"""The history checker of issue 40's chaos workbench: a recorded history in, the course's rules checked,
each violation shown with the smallest slice of history that proves it.

A history is JSON lines, one event each, every event with "v": 1, "kind" and a time ("at", or "start" and
"end" for an operation).  The recorder (the soak's, where learner code cannot reach) writes:

    {"kind": "config", "attempt_limit": 3, "recovery_budget": 90, "submit_budget": 5}      once, first
    {"kind": "submit", "start": t0, "end": t1, "outcome": "accepted" | "refused" | "error", "job": J}
    {"kind": "submit", "start": t0, "end": null}                        an answer that never came
    {"kind": "row", "at": t, "job": J, "status": S, "token": T, "attempts": n, "lease_until": t,
     "next_attempt_at": t, "result_ref": R}                               the job row, as the judge saw it change
    {"kind": "outbox", "at": t, "event": E, "job": J, "state": "created" | "claimed" | "sent"}
    {"kind": "dead_letter", "at": t, "job": J}
    {"kind": "cancel", "at": t, "job": J}                                 a cancel the producer asked for
    {"kind": "effect", "at": t, "job": J, "digest": D, "expected": D2}    an export file and what it must hold
    {"kind": "fault", "at": t, "target": X, "action": A}                  the nemesis's own actions
    {"kind": "end", "at": t}                                               the run's last moment

The rules (RULES, named and explained on the page) are the course's: one pass over the events grouped by
job, so 100,000 events take well under a few seconds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

VERSION = 1
TERMINAL = ("succeeded", "failed", "cancelled")
SLICE_LIMIT = 40     # events in a violation's slice, at most: the job's own first, then the faults around
FAULT_MARGIN = 2.0   # seconds of faults kept either side of the job's own events

RULES = {
    "lost": "An acknowledged job is never lost: it ends terminal, or is still queued or leased where recovery "
            "will find it.",
    "one_result": "At most one effective result per job, and it holds the job's own payload.",
    "stale_finish": "No finish is accepted from a stale token: a job ends only under the token of its latest "
                    "claim.",
    "early_claim": "No job is claimed before its backoff has elapsed (next_attempt_at).",
    "attempt_limit": "Attempts never pass the limit; a job that reaches it fails, with a dead letter.",
    "recovery_budget": "Every lease that expired was recovered within the recovery budget.",
    "outbox_sent": "Every outbox event is sent at least once, unless its job has already ended.",
    "cancel_honoured": "A job cancelled while queued never runs after the cancel; a cancelled job stays "
                       "cancelled.",
    "submit_answers": "A submit answers (accepts, refuses or errs) within its budget, even while a link hangs.",
}


class HistoryError(ValueError):
    """Not a history this checker can read; the message says where."""


@dataclass
class Violation:
    rule: str
    job: str | None
    why: str
    slice: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"rule": self.rule, "job": self.job, "why": self.why, "explains": RULES[self.rule],
                "slice": self.slice}


def read(path: Path) -> list[dict]:
    events = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise HistoryError(f"{path}:{number}: not JSON") from None
            if event.get("v") != VERSION or "kind" not in event:
                raise HistoryError(f"{path}:{number}: not a version-{VERSION} event: {line[:120]!r}")
            events.append(event)
    return events


def when(event: dict) -> float:
    return event.get("at", event.get("start")) or 0.0


def check(events: list[dict]) -> list[Violation]:
    config = next((e for e in events if e["kind"] == "config"), {})
    limit, budget = config.get("attempt_limit", 3), config.get("recovery_budget", 90.0)
    submit_budget = config.get("submit_budget", 5.0)
    end = max((when(e) for e in events if e["kind"] == "end"), default=max(map(when, events), default=0.0))
    by_job: dict[str, list[dict]] = defaultdict(list)
    faults = []
    for event in events:
        if event.get("job"):
            by_job[event["job"]].append(event)
        if event["kind"] == "fault":
            faults.append(event)
    found: list[Violation] = []

    def slice_of(job: str | None, *extra: dict) -> list[dict]:
        own = sorted(by_job.get(job, []) if job else list(extra), key=when)
        if not own:
            return []
        lo, hi = when(own[0]) - FAULT_MARGIN, when(own[-1]) + FAULT_MARGIN
        around = [f for f in faults if lo <= when(f) <= hi]
        return sorted(own[:SLICE_LIMIT] + around[:max(0, SLICE_LIMIT - len(own))], key=when)

    def violate(rule: str, job: str | None, why: str, *extra: dict) -> None:
        found.append(Violation(rule, job, why, slice_of(job, *extra)))

    for event in events:
        if event["kind"] == "submit":
            took = None if event.get("end") is None else event["end"] - event["start"]
            if took is None or took > submit_budget:
                violate("submit_answers", event.get("job"),
                        "the submit never answered" if took is None else
                        f"the submit answered after {took:.1f} s (budget {submit_budget} s)", event)

    for job, own in by_job.items():
        own.sort(key=when)
        accepted = any(e["kind"] == "submit" and e.get("outcome") == "accepted" for e in own)
        rows = [e for e in own if e["kind"] == "row"]
        last = rows[-1] if rows else None
        if accepted and (last is None or last["status"] not in (*TERMINAL, "queued", "running")):
            violate("lost", job, "acknowledged, but no job row was ever seen" if last is None else
                    f"acknowledged, and its row ended as {last['status']!r}")
        # (still running under a lease that expired long ago is the recovery budget's to say: one cause, once)
        _row_rules(job, rows, own, limit, budget, end, violate)
        results = {e["result_ref"] for e in rows if e.get("result_ref")}
        if len(results) > 1:
            violate("one_result", job, f"{len(results)} different result_refs: {sorted(results)}")
        for effect in (e for e in own if e["kind"] == "effect"):
            if effect.get("expected") is not None and effect.get("digest") != effect["expected"]:
                violate("one_result", job, "the export file does not hold the job's payload")
        events_of = defaultdict(set)
        for e in own:
            if e["kind"] == "outbox":
                events_of[e["event"]].add(e["state"])
        for event_id, states in events_of.items():
            if "created" in states and "sent" not in states and not (last and last["status"] in TERMINAL):
                violate("outbox_sent", job, f"outbox event {event_id} was created and never sent")
    return found


def _row_rules(job, rows, own, limit, budget, end, violate) -> None:
    """The rules about one job's row transitions, in order."""
    # Rows are seen by polling, so a transition can be missed: a rule fires only on what the rows seen prove.
    claim_token, claim_attempts, not_before, cancelled_at = None, None, None, None
    cancels = [e for e in own if e["kind"] == "cancel"]
    dead = any(e["kind"] == "dead_letter" for e in own)
    for before, row in (zip([None, *rows[:-1]], rows, strict=True) if rows else ()):
        status, at = row["status"], row["at"]
        if status == "running" and (before is None or before["status"] != "running"
                                    or before.get("token") != row.get("token")):
            # The claimed row's own next_attempt_at first: a backoff moved into the past after the last row
            # seen must not make an honest claim look early.
            due = row.get("next_attempt_at") if row.get("next_attempt_at") is not None else not_before
            if due is not None and at < due:
                violate("early_claim", job, f"claimed {due - at:.1f} s before next_attempt_at")
            claim_token, claim_attempts = row.get("token"), row.get("attempts")
        # Stale only within one claim's generation (same attempts): a re-claim missed between polls is not one.
        if status in ("succeeded", "failed") and before is not None and before["status"] == "running" \
                and claim_token is not None and row.get("attempts") == claim_attempts \
                and row.get("token") not in (None, claim_token):
            violate("stale_finish", job, f"finished under token {row.get('token')}, the latest claim's is "
                                         f"{claim_token}")
        if (row.get("attempts") or 0) > limit:
            violate("attempt_limit", job, f"attempts {row['attempts']}, the limit is {limit}")
        if before is not None and before["status"] == "running" and before.get("lease_until") \
                and at > before["lease_until"] + budget:
            violate("recovery_budget", job, f"the lease ended at {before['lease_until']:.1f}, the next change "
                                            f"came {at - before['lease_until']:.1f} s later (budget {budget} s)")
        if status == "cancelled" and cancelled_at is None:
            cancelled_at = at
        elif cancelled_at is not None and status != "cancelled":
            violate("cancel_honoured", job, f"cancelled, then {status}")
        if cancels and before is not None and before["status"] == "queued" and status == "running" \
                and any(c["at"] < at for c in cancels):
            violate("cancel_honoured", job, "claimed after a cancel asked while it was queued")
        not_before = row.get("next_attempt_at")
    last = rows[-1] if rows else None
    if last and last["status"] == "running" and last.get("lease_until") and end > last["lease_until"] + budget:
        violate("recovery_budget", job, f"its lease ended at {last['lease_until']:.1f} and nothing recovered it "
                                        f"by the end ({end - last['lease_until']:.1f} s later)")
    if last and last["status"] == "failed" and (last.get("attempts") or 0) >= limit and not dead:
        violate("attempt_limit", job, "failed at the attempt limit without a dead letter")
