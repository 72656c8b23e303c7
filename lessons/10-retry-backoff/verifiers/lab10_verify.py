"""Verifier for lesson 10: retries with a count, backoff, jitter and a deadline — counted, not guessed.

The lesson's worker runs the learner's app through lab10_worker.py (see there, and tasks.json): every
execution, read and planned retry is recorded with its attempt (self.request.retries), attempts end in
order, and the backoff is shrunk, so no check waits out the real delays.  Every check submits its own jobs.

10.1  python verify_retry.py prints {'rows': 1} for fail_until=2; a job of ours with fail_until=2
      runs attempts 0, 1, 2 (2 retries) and succeeds with rows == 1
10.2  a job whose deadline passed fails with "export deadline exceeded" after 0 reads
10.3  a job whose read raises ValueError (injected by the probe) runs once: 1 read, 0 retries
10.4  fail_until=10: exactly attempts 0..3 with a read each, then FAILURE with the temporary error
10.5  a fail_until=10 job: every planned countdown n lies in [0, min(backoff_max, backoff_base * 2**n)]
      and every execution carries the producer's deadline_epoch unchanged; a second such job planned other
      waits (drawn at random: jitter)
10.6  exercise: a job whose read leaves 0.05 s of budget (the probe sets the task's clock; the
      deadline itself is far enough away for any delivery) fails at once with "insufficient retry
      budget": 1 read, 0 retries

The learner's modules never load here (the judge): jobs are sent and read in a probe
(shared.lesson_celery.LearnerTask, lab10_learner.py), which reports what it saw; the checks decide.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from uuid import uuid4

from shared.lesson_celery import LearnerTask, declared_worker
from shared.logs import LOG_DIR
from shared.events import read_events
from shared.scripts import log_lines, printed_dicts, run_script
from shared.settings import redact
from shared.figures import attach, bar, lane, lanes, mark
from shared.i18n import listed, t
from shared.probe import Probe
from shared.proc import WaitTimeout, wait_until
from shared.tap import Check, run

EVENTS = LOG_DIR / "retry-events.jsonl"
PERMANENT = LOG_DIR / "retry-permanent.txt"
BUDGET = LOG_DIR / "retry-budget.txt"
DEFAULT_BACKOFF = {"backoff_base": 1.0, "backoff_max": 8.0}  # the course's caps: min(8, 2**n)
FINISH_SECONDS = 20  # bound on one job's run; a pass takes well under a second
learner = Probe(verifiers=Path(__file__).resolve().parent)  # the learner's modules load there, never here
RETRY_EXPORT = LearnerTask(learner, "retry_tasks:retry_export")


def checks() -> list[Check]:
    return [
        Check("10.1", check_recovers, "worker; python verify_retry.py"),
        Check("10.2", check_expired, "worker"),
        Check("10.3", check_permanent, "worker"),
        Check("10.4", check_limit, "worker"),
        Check("10.5", check_delays, "worker"),
        Check("10.6", check_budget, "worker"),
    ]


class Run:
    """One job submitted to the running worker and the facts about it: the probe's events, grouped by attempt, and
    the result backend (read through the probe that sent it)."""

    def __init__(self, deadline: float, fail_until: int, listed_in=None):
        declared_worker().running()
        RETRY_EXPORT.load()
        self.job_id = str(uuid4())
        if listed_in is not None:
            with open(listed_in, "a", encoding="utf-8") as stream:
                stream.write(self.job_id + "\n")
        self.deadline, self.fail_until = deadline, fail_until
        self.submitted = time.time()  # for the timeline figure only
        self.id = RETRY_EXPORT.send([self.job_id, deadline, fail_until])
        self.last: dict | None = None
        self.state = "PENDING"

    def events(self, kind: str) -> list[dict]:
        return read_events(EVENTS, kind=kind, task_id=self.id)

    def attempts(self, kind: str) -> list[int]:
        """The attempt number (request.retries) of each `kind` event, in attempt order, never the file's order."""
        return sorted(e["retries"] for e in self.events(kind) if isinstance(e.get("retries"), int))

    def _ending(self) -> dict | None:
        """The execution that ended the task (the highest attempt, in a state other than RETRY), once every
        earlier attempt has ended too; None while any of them is still under way."""
        ends = {e["retries"]: e for e in self.events("end") if isinstance(e.get("retries"), int)}
        last = max(ends, default=None)
        if last is None or ends[last].get("state") == "RETRY" or any(n not in ends for n in range(last)):
            return None
        return ends[last]

    def finish(self, c, task_clock: bool = False) -> Run:
        """Wait (bounded) for the task's last execution, read its final state from the result backend, and
        attach the job's timeline to check `c`."""
        with contextlib.suppress(WaitTimeout):
            self.last = wait_until(self._ending, FINISH_SECONDS, f"{self.id} to end")
        self.state = self.outcome()["state"]
        attach(c, lambda: timeline(self, task_clock))
        return self

    def outcome(self) -> dict:
        """The result backend's state and result of this task now: {"state", "value" or "exception"}."""
        return learner.call("lab10_learner:outcome", self.id)

    def assert_finished(self) -> None:
        assert self.last is not None, t("the task did not end within {finish_seconds} s: {summary}",
                                        finish_seconds=FINISH_SECONDS, summary=self.summary())
        assert self.state == self.last.get("state"), t("the result backend's state {state} differs from the last "
                                                       "execution's (attempt {retries}) {state2}: {summary}",
                                                       state=self.state, retries=self.last.get('retries'),
                                                       state2=self.last.get('state'), summary=self.summary())

    def error(self) -> str:
        now = self.outcome()
        return redact(now["exception"] if "exception" in now else repr(now.get("value")))

    def summary(self) -> str:
        starts, reads, retries = self.attempts("start"), self.attempts("read"), self.attempts("retry")
        return t("executions at attempts {starts}, reads at attempts {reads}, retries planned by attempts {retries}, "
                 "final state {state}", starts=starts, reads=reads, retries=retries, state=self.state)


# ---------------------------------------------------------------- the timeline figure (a picture, never a verdict)

DEADLINE_SHOWN = 2.0  # a deadline further than this (or the attempts' span) from them is told, not drawn


def _knobs(event: dict) -> dict:
    """The backoff the task had when it planned this retry: the probe's shrunk values, or the course's."""
    return {k: event.get(k) if isinstance(event.get(k), (int, float)) else v for k, v in DEFAULT_BACKOFF.items()}


def _cap(event: dict) -> float:
    knobs = _knobs(event)
    return min(knobs["backoff_max"], knobs["backoff_base"] * 2.0 ** event["retries"])


def timeline(run: Run, task_clock: bool = False) -> dict:
    """One lane for the job: a bar per attempt (start to end, as the worker recorded them), a wait bar per
    planned retry (its countdown, ending at the next attempt's eta; labelled against the doubling cap), a
    mark per read, and the deadline as a line when it is near enough to see (else told in the caption).
    task_clock: the deadline as the task's (probe-set) clock saw it after a budget-eating read."""
    events = [e for e in read_events(EVENTS, task_id=run.id) if isinstance(e.get("at"), (int, float))]

    def by_attempt(kind: str) -> dict:
        return {e["retries"]: e for e in events if e.get("kind") == kind and isinstance(e.get("retries"), int)}
    starts, ends, retries = by_attempt("start"), by_attempt("end"), by_attempt("retry")
    bars, marks = [], [mark(run.submitted, "submitted", "queued")]
    for n in sorted(starts):
        end = ends.get(n)
        state = end.get("state") if end else "no end recorded"
        bars.append(bar(starts[n]["at"], end["at"] if end else starts[n]["at"], f"attempt {n}: {state}",
                        "ok" if state == "SUCCESS" else "fail" if end else "run"))
    for n in sorted(retries):
        when = retries[n].get("when")
        if isinstance(when, (int, float)):
            cap = _cap(retries[n])
            # The countdown ends at the next attempt's eta; without one, it is drawn from the retry signal
            # (which comes after the RETRY state is stored, so a little late).
            eta = (starts.get(n + 1) or {}).get("eta_at")
            begin = eta - when if isinstance(eta, (int, float)) else retries[n]["at"]
            bars.append(bar(begin, begin + when, f"wait {when:.3f}s {'≤' if 0 <= when <= cap else '>'} cap {cap:g}s",
                            "wait"))
    marks += [mark(e["at"], "read", "event") for e in events if e.get("kind") == "read"]
    times = [b["start"] for b in bars] + [b["end"] for b in bars] + [m["at"] for m in marks]
    span = max(times) - min(times)
    lines, caption = [], None
    if task_clock:
        used = [e for e in events if e.get("kind") == "budget-used"]
        if used:
            lines.append(mark(used[0]["at"] + float(used[0].get("left") or 0), "deadline (task's clock)",
                              "deadline"))
        caption = t("deadline: after the read the task's clock leaves {left} s (set by the probe); the real "
                    "deadline_epoch is {deadline:.1f} s after submission", left=used[0].get('left') if used else '?',
                    deadline=run.deadline - run.submitted)
    elif min(times) - max(DEADLINE_SHOWN, span) <= run.deadline <= max(times) + max(DEADLINE_SHOWN, span):
        lines.append(mark(run.deadline, "deadline_epoch", "deadline"))
    else:
        caption = t("deadline_epoch is {deadline:.1f} s after submission, beyond the figure",
                    deadline=run.deadline - run.submitted)
    return lanes(t("each attempt and the planned waits (fail_until={fail_until})", fail_until=run.fail_until),
                 [lane(f"job {run.job_id[:8]}", bars=bars, marks=marks)], lines=lines, caption=caption)


# ---------------------------------------------------------------- 10.1

def check_recovers(c) -> None:
    declared_worker().running()
    # The script's own waits add up to 45 s.
    done = run_script(["verify_retry.py"], 50, late=t("verify_retry.py did not finish within 50 s"))
    c.note(t("python verify_retry.py → exit code {returncode}", returncode=done.code))
    done.tail(c, 3)
    dicts = printed_dicts(done.lines)
    first = dicts[0] if dicts else None
    assert done.code == 0 and isinstance(first, dict) and first.get("rows") == 1, t(
        "verify_retry.py's first result should be a dict with rows 1 (fail_until=2 succeeds after two retries)")

    run = Run(time.time() + 30, 2).finish(c)
    fetched = [e["args"][0] if e.get("args") else None
               for e in sorted(run.events("read"), key=lambda e: e.get("retries") or 0)]
    c.note(t("fail_until=2: {summary}; fetch_snapshot got attempt = {fetched}", summary=run.summary(), fetched=fetched))
    run.assert_finished()
    assert run.state == "SUCCESS", t("fail_until=2 should succeed after retrying, got {state} ({error})",
                                     state=run.state, error=run.error())
    assert run.attempts("start") == [0, 1, 2] and run.attempts("retry") == [0, 1], t(
        "expected exactly two retries and three executions (attempts 0, 1, 2): pass self.request.retries as the "
        "attempt and raise self.retry(...)")
    value = run.outcome().get("value")
    assert isinstance(value, dict) and value.get("rows") == 1, t(
        "rows should be 1, got {value}", value=redact(repr(value)))


# ---------------------------------------------------------------- 10.2

def check_expired(c) -> None:
    run = Run(time.time() - 1, 0).finish(c)
    c.note(t("deadline 1 s in the past, fail_until=0: {summary}, error {error}", summary=run.summary(),
             error=run.error()))
    run.assert_finished()
    reads = run.events("read")
    assert not reads, t("the expired task still called fetch_snapshot {n_reads} time(s): check remaining <= 0 before "
                        "reading", n_reads=len(reads))
    assert run.state == "FAILURE" and "export deadline exceeded" in run.error(), t(
        "the expired task should fail with RuntimeError('export deadline exceeded'), got {state} {error}",
        state=run.state, error=run.error())
    assert run.attempts("start") == [0] and not run.attempts("retry"), t("an expired task must not retry")


# ---------------------------------------------------------------- 10.3

def check_permanent(c) -> None:
    run = Run(time.time() + 30, 0, listed_in=PERMANENT).finish(c)
    c.note(t("the read raises ValueError('invalid export request'): {summary}, error {error}", summary=run.summary(),
             error=run.error()))
    run.assert_finished()
    starts, reads = run.attempts("start"), run.attempts("read")
    assert reads, t("the task never called fetch_snapshot")
    assert starts == [0] and reads == [0] and not run.attempts("retry"), t(
        "the permanent error was retried ({n_starts} executions): catch only TemporaryReadError", n_starts=len(starts))
    assert run.state == "FAILURE" and "ValueError" in run.error(), t(
        "it should fail with the ValueError, got {state} {error}", state=run.state, error=run.error())


# ---------------------------------------------------------------- 10.4

def check_limit(c) -> None:
    run = Run(time.time() + 60, 10).finish(c)
    c.note(t("fail_until=10: {summary}, error {error}", summary=run.summary(), error=run.error()))
    for line in log_lines(declared_worker().log_text(), run.id, "retry", limit=3):
        c.note("  " + line.split("] ", 1)[-1][:180])
    run.assert_finished()
    assert run.state == "FAILURE", t("fail_until=10 should end in FAILURE, got {state}", state=run.state)
    starts = run.attempts("start")
    assert starts == [0, 1, 2, 3] and run.attempts("read") == [0, 1, 2, 3], t(
        "expected exactly 1 + 3 = 4 executions (attempts 0..3), got attempts {starts}: max_retries=3 does not count "
        "the first run", starts=starts)
    assert "TemporaryReadError" in run.error(), t("the final error should be the original TemporaryReadError, got "
                                                  "{error}", error=run.error())


# ---------------------------------------------------------------- 10.5

def check_delays(c) -> None:
    run, twin = Run(time.time() + 60, 10), Run(time.time() + 60, 10)  # twin: the same job again, for the jitter
    for each in (run, twin):
        each.finish(c).assert_finished()
    planned = sorted(run.events("retry"), key=lambda e: e.get("retries") or 0)
    assert planned, t("no planned retry was observed: {summary}", summary=run.summary())
    delays, shrunk = [], False
    for event in planned:
        shrunk = shrunk or _knobs(event) != DEFAULT_BACKOFF
        n, when = event.get("retries"), event.get("when")
        assert isinstance(n, int) and isinstance(when, (int, float)), t(
            "retry {n} has no numeric countdown ({when!r})", n=n, when=when)
        cap = _cap(event)
        delays.append(f"n={n}: {when:.4f} ≤ {cap:g}")
        assert 0 <= when <= cap, t("retry {n} planned a {when:.4f} s wait, outside [0, {cap:g}]: use delay = "
                                   "random.uniform(0, cap)", n=n, when=when, cap=cap)
    if shrunk:
        c.note(t("cap(n) = min(backoff_max, backoff_base × 2^n) (the probe shrank backoff_base/backoff_max)"))
    else:
        c.note(t("cap(n) = min(backoff_max, backoff_base × 2^n) (the course's 8 and 1)"))
    c.note(t("fail_until=10: {delays}", delays=listed(delays, semicolons=True)))
    # Drawn at random, two jobs' waits differ (a tie has probability 0); a formula gives both the same waits.
    waits = {e.get("retries"): e.get("when") for e in planned}
    again = {e.get("retries"): e.get("when") for e in twin.events("retry")}
    c.note(t("the same job again: {delays}", delays=listed([f"n={n}: {when:.4f}" for n, when in sorted(again.items())
                                                             if isinstance(when, (int, float))], semicolons=True)))
    assert waits != again, t("two jobs planned exactly the same waits: the delay is a formula, not drawn at random. "
                             "Full jitter, delay = random.uniform(0, cap), keeps failed tasks from coming back in step")
    starts = run.events("start")
    deadlines = sorted({e["args"][1] for e in starts if len(e.get("args", [])) > 1})
    c.note(t("  deadline_epoch carried by {n_starts} executions: {deadlines} (submitted {deadline})",
             n_starts=len(starts), deadlines=deadlines, deadline=run.deadline))
    assert deadlines == [run.deadline], t("deadline_epoch changed on a retry: retry without new arguments, and never "
                                          "recompute the deadline in the worker")


# ---------------------------------------------------------------- 10.6

def check_budget(c) -> None:
    # The deadline is a minute away, so the entry check passes however slowly the message travels; the probe
    # then makes the failed read use up the budget: the retry decision sees 0.05 s left, as in the exercise.
    run = Run(time.time() + 60, 2, listed_in=BUDGET).finish(c, task_clock=True)
    used = run.events("budget-used")
    c.note(t("0.05 s of budget left after the failed read, fail_until=2 (3 retries left): {summary}, error {error}",
             summary=run.summary(), error=run.error()))
    run.assert_finished()
    assert used, t("the task never called fetch_snapshot ({error}): the message arrived after its 60 s deadline, or "
                   "the task failed before the read", error=run.error())
    assert run.state == "FAILURE" and "insufficient retry budget" in run.error(), t(
        "it should fail at once with RuntimeError('insufficient retry budget'), got {state} {error}: compare "
        "time.time() + delay + 0.1 with the deadline before scheduling a retry", state=run.state, error=run.error())
    assert run.attempts("start") == [0] and run.attempts("read") == [0] and not run.attempts("retry"), t(
        "with the budget too small no retry may be scheduled")


if __name__ == "__main__":
    run(checks())
