"""Lesson 15's timeline figures (not a lesson file; pictures, never a verdict): 15.2's lease expiry and
recovery, 15.3's dead letter and replay, 15.8's three claims to exhaustion.

The checks stamp their own steps with time.time() (the `tl` dicts); the worker's starts and ends come from the
probe's events.  A time the kit moves with an UPDATE is drawn where the move happened.
"""

from __future__ import annotations

import time

from lab15_fixture import events

from shared.events import job_runs, short
from shared.figures import bar, lane, lanes, mark
from shared.i18n import t


def _at(tl: dict, key: str, label, kind: str = "event") -> list[dict]:
    """A mark at the check's moment `key`, if the check got that far."""
    return [mark(tl[key], label, kind)] if key in tl else []


def _claim(at: float, attempts) -> dict:
    return mark(at, f"claim → attempts={attempts}", "claim")


def _ended(at: float, status: str) -> dict:
    return mark(at, status, "ok" if status == "succeeded" else "fail")


def _runs(job_id: str) -> list[tuple[dict, dict | None]]:
    """This job's task runs, (start, end or None), in the order they started (the probe's events)."""
    seen = [e for e in events() if isinstance(e.get("at"), (int, float))]
    return sorted(job_runs(seen, job_id), key=lambda run: run[0]["at"])


def _attempt_run(job_id: str, attempt: int, after: float) -> tuple[dict, dict] | None:
    """The execution (start, end) that claimed this attempt: its return value says so, or else the last
    one that started after `after`, ended and did not say it claimed nothing."""
    ended = [(s, e) for s, e in _runs(job_id) if e is not None]
    told = [(s, e) for s, e in ended if isinstance(e.get("retval"), dict) and e["retval"].get("attempt") == attempt]
    guess = [(s, e) for s, e in ended if s["at"] >= after
             and not (isinstance(e.get("retval"), dict) and e["retval"].get("claimed") is False)]
    return (told or guess or [None])[-1]


def recovery_lanes(job_id: str, tl: dict) -> dict:
    """15.2: a lane per actor — the worker, the job's row (leases and the backoff), the recovery scan, the
    outbox and publisher — from the claim that was killed to the claim after the backoff."""
    now = time.time()
    worker = lane("worker", marks=_at(tl, "kill", t("SIGKILL (pool child)"), "killed"))
    row = lane(t("job row"))
    scans = lane("recover_batch()", marks=_at(tl, "scan_live", t("lease still live → untouched"), "lease")
                 + _at(tl, "scan", t("lease expired → queued (lease_expired)"), "retry"))
    outbox = lane(t("outbox and publisher"), marks=_at(tl, "scan", t("new event 2 (available_at = next_attempt_at)"))
                  + _at(tl, "pub1", t("event 1 sent"))
                  + _at(tl, "pub_wait", t("publisher.py during the backoff: not due, nothing sent"), "wait")
                  + _at(tl, "pub2", t("event 2 sent")))
    first = [s for s, _ in _runs(job_id) if s.get("pid") == tl.get("child") and s["at"] <= tl.get("kill", now)][-1:]
    if first:
        worker["bars"].append(bar(first[0]["at"], tl.get("kill", now), t("attempt 1"), "run"))
        worker["marks"].append(_claim(first[0]["at"], tl.get("attempts1", "?")))
        row["bars"].append(bar(first[0]["at"], tl.get("expire", now), t("lease 1 (lease_until moved into the past)"),
                               "lease"))
    if "scan" in tl and isinstance(tl.get("backoff"), (int, float)):
        due = tl["scan"] + tl["backoff"]
        moved = "ff" in tl and tl["ff"] < due
        row["bars"].append(bar(tl["scan"], min(due, tl["ff"]) if moved else min(due, now),
                               t("backoff {backoff:.1f} s{value}", backoff=tl['backoff'],
                                 value=t(' (ended early by UPDATE)') if moved else ''), "wait"))
    second = _attempt_run(job_id, 2, tl["expire"]) if "pub2" in tl and "expire" in tl else None
    if second:
        start, end = second
        worker["bars"].append(bar(start["at"], end["at"], t("attempt 2"), "run"))
        worker["marks"].append(_claim(start["at"], tl.get("attempts2", "?")))
        row["bars"].append(bar(start["at"], end["at"], t("lease 2"), "lease"))
        row["marks"].append(_ended(end["at"], tl.get("status", "?")))
    return lanes(t("lease expiry → recovery → backoff → new event → claim"), [worker, row, scans, outbox],
                 lines=_at(tl, "expire", t("lease_until moved into the past (UPDATE)"), "deadline")
                 + _at(tl, "ff", t("next_attempt_at and available_at moved 11 s back (UPDATE)"), "deadline"),
                 caption=t("moments as the checker and the worker recorded them (wall clock); a time the kit moved "
                           "with an UPDATE is drawn where the move happened"))


def dead_letter_lanes(job_id: str, new_id: str | None, tl: dict) -> dict:
    """15.3: the failed job's lane (claim, deadline, the scan's failure and dead letter, a refused replay)
    and the replay's lane (created, published, run to its end)."""
    now = time.time()
    old = lane(t("job {job_id}", job_id=short(job_id)),
               marks=_at(tl, "scan", f"failed: {tl.get('error_code')}", "fail")
               + _at(tl, "gate_full", t("replay() with the gate full → {gate_answer}",
                                        gate_answer=tl.get('gate_answer')), "fail"))
    if "claim" in tl:
        old["marks"].append(_claim(tl["claim"], tl.get("got", "?")))
        old["bars"].append(bar(tl["claim"], tl.get("moved", now), t("lease"), "lease"))
    if "scan" in tl and tl.get("reason"):
        old["marks"].append(mark(tl["scan"], t("dead letter: {reason}", reason=tl['reason']), "dead"))
    lanes_ = [old]
    if new_id and "replay" in tl:
        new = lane(t("replay {new_id}", new_id=short(new_id)),
                   [bar(tl["replay"], tl.get("pub", now), "queued", "queued")],
                   [mark(tl["replay"], t("replay_job.py → new job (replay_of = the failed job)"), "replay")]
                   + _at(tl, "pub", t("event sent")))
        lanes_.append(new)
        run = _attempt_run(new_id, 1, tl["pub"]) if "pub" in tl else None
        if run:
            new["bars"].append(bar(run[0]["at"], run[1]["at"], t("attempt 1"), "run"))
        if "pub" in tl and "status" in tl:
            new["marks"].append(_ended(run[1]["at"] if run else tl.get("done", now), tl["status"]))
    if "refused" in tl:
        lanes_.append(lane(t("a queued job"), marks=_at(tl, "refused", t(
            "replay_job.py → exit code {refused_code}, nothing created", refused_code=tl.get('refused_code')), "fail")))
    return lanes(t("dead letter and replay"), lanes_,
                 lines=_at(tl, "moved", t("deadline and lease moved into the past (UPDATE)"), "deadline"),
                 caption=t("moments as the checker and the worker recorded them (wall clock)"))


def exhausted_lanes(tl: dict) -> dict:
    """15.8: one lane for the job: three claims, each lease ended by the kit and scanned, the backoffs the kit
    skipped, the dead letter, and the refused fourth claim."""
    now, job = time.time(), lane(t("the job"))
    for k in (1, 2, 3):
        if f"claim{k}" not in tl:
            break
        job["marks"].append(_claim(tl[f"claim{k}"], tl.get(f"got{k}", "?")))
        job["bars"].append(bar(tl[f"claim{k}"], tl.get(f"expire{k}", now), t("lease {k}", k=k), "lease"))
        if f"scan{k}" in tl:
            status, error = tl.get(f"status{k}"), tl.get(f"error{k}")
            job["marks"].append(mark(tl[f"scan{k}"], f"{status}: {error}", "retry" if status == "queued" else "fail"))
            if f"due{k + 1}" in tl:
                job["bars"].append(bar(tl[f"scan{k}"], tl[f"due{k + 1}"], t("backoff (ended early by UPDATE)"), "wait"))
    if tl.get("reason"):
        job["marks"].append(mark(tl["scan3"], t("dead letter: {reason}", reason=tl['reason']), "dead"))
    job["marks"] += _at(tl, "fourth", t("4th claim() → {fourth_answer}", fourth_answer=tl.get('fourth_answer')),
                        "other")
    return lanes(t("three claims, expired leases and the dead letter"), [job],
                 lines=[mark(tl[f"expire{k}"], t("lease {k} moved into the past", k=k), "deadline")
                        for k in (1, 2, 3) if f"expire{k}" in tl],
                 caption=t("moments as the checker recorded them (wall clock)"))
