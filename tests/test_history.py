"""checks/tools/history.py on histories made by hand: a clean one has no violation; each broken one has the
violation that names its rule, and only that one, with a slice of that job's events and the faults around
them -- never another job's.  Nothing runs but the checker."""

from __future__ import annotations

import json

import pytest

from checks.tools import history

CONFIG = {"v": 1, "kind": "config", "attempt_limit": 3, "recovery_budget": 10, "submit_budget": 5}


def ev(kind, **fields):
    return {"v": 1, "kind": kind, **fields}


def row(at, job, status, token=None, attempts=0, lease_until=None, next_attempt_at=None, result_ref=None):
    return ev("row", at=at, job=job, status=status, token=token, attempts=attempts, lease_until=lease_until,
              next_attempt_at=next_attempt_at, result_ref=result_ref)


def good_job(job, t0=0.0):
    """Submitted, its event sent, claimed once, finished under its token with one result."""
    return [ev("submit", start=t0, end=t0 + 0.1, outcome="accepted", job=job),
            row(t0 + 0.1, job, "queued", next_attempt_at=t0),
            ev("outbox", at=t0 + 0.1, event=f"e-{job}", job=job, state="created"),
            ev("outbox", at=t0 + 0.3, event=f"e-{job}", job=job, state="sent"),
            row(t0 + 0.5, job, "running", token="t1", attempts=1, lease_until=t0 + 30.5),
            ev("effect", at=t0 + 0.9, job=job, digest="d", expected="d"),
            row(t0 + 1.0, job, "succeeded", token="t1", attempts=1, result_ref=f"artifacts/{job}.json")]


def rules_of(events):
    return sorted((v.rule, v.job) for v in history.check([CONFIG, *events, ev("end", at=100.0)]))


def test_a_clean_history_under_faults_has_no_violation():
    events = good_job("a") + good_job("b", 5.0) + [ev("fault", at=0.7, target="worker", action="sigkill")]
    assert rules_of(events) == []


@pytest.mark.parametrize("rule, broken", [
    ("lost", [ev("submit", start=0, end=0.1, outcome="accepted", job="a")]),
    ("one_result", good_job("a") + [row(2.0, "a", "succeeded", token="t1", attempts=1, result_ref="other.json")]),
    ("stale_finish", good_job("a")[:5] + [row(0.8, "a", "running", token="t2", attempts=2, lease_until=40),
                                          row(1.0, "a", "succeeded", token="t1", attempts=2, result_ref="r")]),
    ("early_claim", [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                     row(0.1, "a", "queued", next_attempt_at=20.0),
                     row(1.0, "a", "running", token="t1", attempts=1, lease_until=30),
                     row(2.0, "a", "succeeded", token="t1", attempts=1, result_ref="r")]),
    ("attempt_limit", [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                       row(1.0, "a", "running", token="t3", attempts=3, lease_until=31),
                       row(2.0, "a", "failed", token="t3", attempts=3)]),
    ("recovery_budget", [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                         row(1.0, "a", "running", token="t1", attempts=1, lease_until=5.0),
                         row(40.0, "a", "queued", attempts=1, next_attempt_at=40.0),
                         row(41.0, "a", "running", token="t2", attempts=2, lease_until=71.0),
                         row(42.0, "a", "succeeded", token="t2", attempts=2, result_ref="r")]),
    ("outbox_sent", [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                     row(0.1, "a", "queued"), ev("outbox", at=0.1, event="e", job="a", state="created")]),
    ("cancel_honoured", [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                         row(0.1, "a", "queued"), ev("cancel", at=0.5, job="a"),
                         row(1.0, "a", "running", token="t1", attempts=1, lease_until=31),
                         row(2.0, "a", "cancelled", token="t1", attempts=1)]),
    ("submit_answers", [ev("submit", start=0, end=None)]),
])
def test_each_broken_history_shows_the_rule_it_breaks_and_only_that_one(rule, broken):
    assert {r for r, _ in rules_of(broken)} == {rule}, rules_of(broken)
    assert rule in history.RULES


def test_a_violation_slice_is_that_jobs_events_and_the_faults_around_them():
    events = good_job("b", 50.0) + [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                                    row(0.1, "a", "queued", next_attempt_at=20.0),
                                    ev("fault", at=0.5, target="link worker->mysql", action="hang"),
                                    ev("fault", at=60.0, target="redis", action="restart"),
                                    row(1.0, "a", "running", token="t1", attempts=1, lease_until=30),
                                    row(2.0, "a", "succeeded", token="t1", attempts=1, result_ref="r")]
    [violation] = history.check([CONFIG, *events, ev("end", at=100.0)])
    assert violation.rule == "early_claim" and violation.job == "a"
    assert {e.get("job") for e in violation.slice} == {"a", None}
    assert [e["action"] for e in violation.slice if e["kind"] == "fault"] == ["hang"]  # not the restart at 60 s
    assert violation.as_dict()["explains"] == history.RULES["early_claim"]


def test_a_history_of_100000_events_is_checked_in_one_pass(tmp_path):
    events = [CONFIG]
    for n in range(100_000 // 7):
        events += good_job(f"j{n}", float(n))
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    assert history.check(history.read(path)) == []


def test_a_line_that_is_not_a_version_1_event_is_a_clear_error(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(CONFIG) + "\n" + '{"kind": "row"}\n', encoding="utf-8")
    with pytest.raises(history.HistoryError, match=r"history.jsonl:2: not a version-1 event"):
        history.read(path)


def test_transitions_missed_between_polls_make_no_false_violation():
    """Rows are polled: a re-claim (queued, running under t2) can fall between two looks, and a backoff can be
    moved into the past after the last look.  Neither is a stale finish or an early claim."""
    missed_reclaim = [ev("submit", start=0, end=0.1, outcome="accepted", job="a"),
                      row(1.0, "a", "running", token="t1", attempts=1, lease_until=31),
                      row(2.0, "a", "succeeded", token="t2", attempts=2, result_ref="r")]
    moved_backoff = [ev("submit", start=0, end=0.1, outcome="accepted", job="b"),
                     row(0.1, "b", "queued", next_attempt_at=50.0),
                     row(10.0, "b", "running", token="t1", attempts=1, lease_until=40, next_attempt_at=5.0),
                     row(11.0, "b", "succeeded", token="t1", attempts=1, result_ref="r")]
    assert rules_of(missed_reclaim + moved_backoff) == []
