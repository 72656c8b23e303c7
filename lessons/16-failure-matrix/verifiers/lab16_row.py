"""One failure-matrix row as it runs (kit module, not a lesson file): what it did and saw (Row), and the
drivers that move a job along the way the deployed system would — publish what is due (settle, await_hold),
run the recovery scan (scan_until), let a dispatch grow old (age_until_requeued).  Facts, never durations:
a job's states are its committed changes, a delivery's outcome is what lab16_worker recorded when it ended.
A job its messages left behind is dispatched again only when the last delivery's claim was refused by the
database (redispatch, recorded with its reason); a delivery that claimed nothing from a claimable job fails
the row instead.
"""

from __future__ import annotations

import contextlib
import time

from lab16_fixture import (GATE, advance, delivery_log, describe_end, events_of, last_seq, max_attempts, outcome,
                           pending_of, transitions_of)
from lab16_record import collapse, now_iso

from shared.events import short
from shared.proc import pid_running
from shared.i18n import t
from shared.lesson_db import job_row, sql
from shared.proc import WaitTimeout, wait_until

SCAN_PERIOD = 0.5      # how often the kit's recovery loop runs recover_batch
MAX_REDISPATCHES = 2   # per job: a claim the database refuses every time is a failure, not bad luck
WAIT_LIMIT = 60.0      # bound on waiting for one dispatch to be run by the worker (generous: costs nothing)
LEASE_BUDGET = 60.0    # an expired lease is back in processing within this (lesson budget)
QUEUED_BUDGET = 90.0   # a sent-but-unclaimed job is back in processing within this


class Row:
    """What one row did and saw: its drill drives it, the evidence is filled from real reads."""

    def __init__(self, case, stack):
        self.case, self.stack = case, stack
        self.jobs: list[str] = []
        self.known: set[str] = set()
        self.labels: list[tuple[int, int, str]] = []   # (the main job's last change seen, order, label)
        self.notes: list[str] = []
        self.phases: dict[str, str] = {}
        self.faults: list[str] = []
        self.redispatches: list[dict] = []
        self.lost_messages: set[str] = set()       # events the row itself marked sent without sending
        self.t_clock: float | None = None   # where recovery is measured from (the fault, unless moved)
        self.skipped = 0.0                   # durable seconds moved instead of waited (counted)
        self.setup_moved = 0.0               # seconds moved to set the scene (not part of recovery)
        self.recovery_seconds: float | None = None
        self.measured_seconds: float | None = None
        self.baseline: dict = {}
        self.extra: dict = {}

    # --- the job(s) of this row
    def job(self, job_id: str) -> str:
        assert job_id not in self.known, t("job {job_id} existed before this row (not a fresh job)",
                                           job_id=short(job_id))
        if job_id not in self.jobs:
            self.jobs.append(job_id)
        return job_id

    def submit(self) -> str:
        return self.job(self.stack.state_store.submit_snapshot(self.products()))

    def products(self) -> list[int]:
        index = getattr(self.case, "index", 0)
        return [int(sql("SELECT id FROM products ORDER BY id LIMIT 1 OFFSET %s", (index % 25,))[0]["id"])]

    # --- phases
    @contextlib.contextmanager
    def fault(self, text: str):
        assert not self.faults, t("a row may inject one fault only")
        self.faults.append(text)
        self.phases["inject"] = now_iso()
        self.t_clock = time.monotonic()
        yield

    def recover(self) -> None:
        self.phases["recover"] = now_iso()

    def clock_from_here(self) -> None:
        """Recovery is measured from now (e.g. the moment the lease ran out), not from the fault."""
        self.t_clock = time.monotonic()
        self.skipped = 0.0

    def recovered(self) -> None:
        assert self.t_clock is not None, t("recovered() before the fault")
        self.phases["recovered"] = now_iso()
        self.measured_seconds = round(time.monotonic() - self.t_clock, 3)
        self.recovery_seconds = round(self.measured_seconds + self.skipped, 3)

    def recover_by_settling(self) -> None:
        """A recovery that is the system's own: each of the row's jobs is published and run to success."""
        self.recover()
        for job in self.jobs:
            settle(self, job)
        self.recovered()

    def advance(self, job_ids, seconds: float, setup: bool = False) -> float:
        moved = advance(job_ids, seconds)
        if setup:
            self.setup_moved += moved
        else:
            self.skipped += moved
        return moved

    # --- evidence
    def observe(self, label: str) -> None:
        """Something the kit saw, placed after the main job's last committed change at this moment."""
        self.labels.append((last_seq(self.jobs[0] if self.jobs else None), len(self.labels), label))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def expect(self, condition, message: str) -> None:
        if not condition:
            raise AssertionError(message)

    def transitions(self) -> list[dict]:
        main = self.jobs[0] if self.jobs else None
        return [{"seq": int(r["seq"]), "status": r["status"], "attempts": int(r["attempts"]),
                 "lease_token": r["lease_token"] and short(r["lease_token"])}
                for r in (transitions_of(main) if main else [])]

    def observed_states(self, changes: list[dict]) -> list[str]:
        """The main job's committed statuses (its transitions()) in commit order, the kit's labels after the
        change they followed."""
        merged = [((c["seq"], 0, 0), c["status"]) for c in changes]
        merged += [((seq, 1, order), label) for seq, order, label in self.labels]
        return collapse([label for _, label in sorted(merged)])


# ================================================================ the recovery drivers

def scan_until(stack, job_id: str, wanted: tuple[str, ...], seconds: float = 30) -> dict:
    """The kit's recovery loop: recover_batch every SCAN_PERIOD until the job reaches a wanted state."""
    def step():
        row = job_row(job_id)
        if row and row["status"] in wanted:
            return row
        stack.scan()
        row = job_row(job_id)
        if row and row["status"] in wanted:
            return row
        time.sleep(SCAN_PERIOD)  # the deployed loop's period (it only ever runs again; nothing waits on it)
        return None
    try:
        return wait_until(step, seconds, f"recovery to make {job_id} {'/'.join(wanted)}", interval=0)
    except WaitTimeout:
        row = job_row(job_id)
        raise AssertionError(t("after {seconds:g}s of recover_batch job {job_id} is still {row} (expected {wanted})",
                               seconds=seconds, job_id=short(job_id), row=row and row['status'],
                               wanted='/'.join(wanted))) from None


def age_until_requeued(row: Row, job_id: str, start: float = 55.0, step: float = 1.0, limit: float = 300.0) -> float:
    """Let the dispatch grow old (moved, 1 s per step from 55 s, a scan after each) until recovery gives the
    job a new pending event: the age it did at.  Time moved before the row's fault sets the scene."""
    setup = not row.faults
    before = {e["id"] for e in events_of(job_id)}
    age = row.advance(job_id, start, setup=setup)
    while True:
        row.stack.scan()
        if any(e["id"] not in before for e in pending_of(job_id)):
            return age
        now = job_row(job_id)
        if not now or now["status"] != "queued":
            raise AssertionError(t("while waiting for the unclaimed recovery, job {job_id} became {now} (no longer "
                                   "queued)", job_id=short(job_id), now=now and now['status']))
        if age >= limit:
            raise AssertionError(t("{limit:g}s after the dispatch the recovery scan still gave job {job_id} no new "
                                   "event", limit=limit, job_id=short(job_id)))
        age += row.advance(job_id, step, setup=setup)


def left_behind(job_id: str, lost: set[str] = frozenset()) -> list[dict] | None:
    """The job's deliveries when its messages are used up and it is still queued and due; else None.

    Read in an order that cannot race: every event sent, the last delivery of each ended (but the `lost`
    ones the row marked sent itself), then the job's row, then the deliveries again, unchanged.  (Reading
    the row first would count a delivery that claimed and finished in between as one that claimed nothing.)"""
    events = events_of(job_id)
    if not events or any(e["sent_at"] is None for e in events):
        return None  # an event is still to be sent: the publisher will wake the job
    log = delivery_log(job_id)
    for event in events:
        if event["id"] in lost:
            continue
        mine = [d for d in log if d["task_id"] == event["id"]]
        if not mine or mine[-1]["end"] is None:
            # Not delivered yet, under way, or killed (task_reject_on_worker_lost sends it back).
            return None
    if any(d["end"] is None and pid_running(d["pid"]) for d in log):
        return None  # some delivery of the job is still under way
    current = job_row(job_id)
    limit = max_attempts()  # the learner's (read in the probe)
    if (not current or current["status"] != "queued" or current["cancel_requested"]
            or current["next_attempt_at"] > current["now"] or current["deadline_at"] <= current["now"]
            or current["attempts"] >= limit):
        return None  # not claimable now: no delivery could have claimed it (recovery decides instead)
    if delivery_log(job_id) != log:
        return None  # a delivery began or ended while the row was read: judge again
    return log


def unclaimed_reason(job_id: str, last: dict) -> str:
    """Why a delivery that ended without a claim may be followed by another dispatch: only when the
    database refused its claim.  Anything else is an AssertionError with the facts."""
    end = last["end"]
    how, facts = outcome(end), describe_end(end)
    if how == "database_error":
        return t("delivery {task_id}'s claim was refused by the database ({facts}): nothing was held, so only "
                 "another dispatch can wake the job", task_id=short(last['task_id']), facts=facts)
    if how == "not_claimed":
        raise AssertionError(t("delivery {task_id} of job {job_id} claimed nothing ({facts}), yet after it ended the "
                               "job was queued and due with no other message on its way: claim must wait for a "
                               "briefly locked row (FOR UPDATE, not SKIP LOCKED) and read the latest row", facts=facts,
                               task_id=short(last['task_id']), job_id=short(job_id)))
    raise AssertionError(t("the last delivery {task_id} of job {job_id} ended {how} ({facts}) and left the job "
                           "queued with no new event: nothing will wake it again", task_id=short(last['task_id']),
                           job_id=short(job_id), how=how, facts=facts))


def redispatch(row: Row, job_id: str, log: list[dict]) -> None:
    """The unclaimed recovery re-dispatches a job whose claim the database refused (age moved, counted).
    The job's newest delivered event should have woken it: its last delivery decides (unclaimed_reason)."""
    sent = [e["id"] for e in events_of(job_id) if e["id"] not in row.lost_messages]
    assert sent, t("the only message of job {job_id} is the one this row lost itself: the row must drive its recovery",
                   job_id=short(job_id))
    delivery = [d for d in log if d["task_id"] == sent[-1]][-1]
    reason = unclaimed_reason(job_id, delivery)
    done = [r for r in row.redispatches if r["job_id"] == job_id]
    assert len(done) < MAX_REDISPATCHES, t("job {job_id} was re-dispatched {n_done} times and its claim was refused "
                                           "every time: {reason}", job_id=short(job_id), n_done=len(done),
                                           reason=reason)
    counted = row.t_clock is not None and row.recovery_seconds is None  # inside the row's measured recovery
    started = time.monotonic()
    age = age_until_requeued(row, job_id)
    row.redispatches.append({"job_id": job_id, "delivery": delivery["task_id"], "reason": reason,
                             "unclaimed_age_seconds": round(age, 3), "during_recovery": counted,
                             "seconds": round(age + time.monotonic() - started, 3)})
    row.note(t("re-dispatched (#{n_done}, {age:.0f} s after the dispatch, time counted): {reason}", age=age,
               n_done=len(done) + 1, reason=reason))


def _stuck(job_id: str, what: str, seconds: float) -> AssertionError:
    current = job_row(job_id)
    seen = "; ".join(f"{short(d['task_id'])}: {describe_end(d['end']) if d['end'] else 'no end'}"
                     for d in delivery_log(job_id)[-4:]) or "-"
    values = {"job_id": short(job_id), "seconds": seconds, "status": current and current["status"],
              "attempts": current and current["attempts"], "pending": len(pending_of(job_id)), "seen": seen}
    if what == "hold":
        return AssertionError(t("job {job_id} did not start writing its file within {seconds:g}s (now {status}, "
                                "attempts {attempts}, pending events {pending}; deliveries: {seen})", **values))
    return AssertionError(t("job {job_id} did not reach the expected state within {seconds:g}s (now {status}, "
                            "attempts {attempts}, pending events {pending}; deliveries: {seen})", **values))


def _drive(row: Row, job_id: str, reached, what: str, seconds: float):
    """Publish what is due until reached() gives a value; a job its messages left behind goes through
    the unclaimed recovery (redispatch).  Each dispatch gets its own bound."""
    deadline = time.monotonic() + seconds
    while True:
        row.stack.pump()
        value = reached()
        if value:
            return value
        log = left_behind(job_id, row.lost_messages)
        if log is not None:
            redispatch(row, job_id, log)
            deadline = time.monotonic() + seconds
            continue
        if time.monotonic() > deadline:
            raise _stuck(job_id, what, seconds)
        time.sleep(0.05)


def settle(row: Row, job_id: str, wanted=("succeeded",), seconds: float = WAIT_LIMIT, condition=None) -> dict:
    """Publish what is due until the job reaches a wanted status (or condition(row) holds)."""
    wanted = (wanted,) if isinstance(wanted, str) else tuple(wanted)
    done = condition or (lambda r: r["status"] in wanted)

    def reached():
        current = job_row(job_id)
        return current if current and done(current) else None
    return _drive(row, job_id, reached, "state", seconds)


def await_hold(row: Row, job_id: str, seconds: float = WAIT_LIMIT) -> dict:
    """Hold the job's write, and publish until the worker is holding it (lab16_worker's hold event)."""
    GATE.hold(job_id)

    def reached():
        held = GATE.holds(job_id)
        return held[0] if held else None
    return _drive(row, job_id, reached, "hold", seconds)
