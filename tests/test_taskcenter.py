"""Unit tests for lesson 07's taskcenter package: the finer points the verifier does not spell out."""

import asyncio
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

LESSON = Path(__file__).resolve().parent.parent / "lessons" / "07-choose-executor"
if str(LESSON) not in sys.path:
    sys.path.append(str(LESSON))

from taskcenter.downstream import DownResponse, DownstreamTimeout, DownstreamUnavailable, FakeDownstream  # noqa: E402
from taskcenter.log import capture  # noqa: E402
from taskcenter.models import ALLOWED, TERMINAL, IllegalTransition, State, transit  # noqa: E402
from taskcenter.retry import Backoff, classify  # noqa: E402
from taskcenter.store import IdempotencyConflict, Store, connect  # noqa: E402
from taskcenter.worker import Worker  # noqa: E402

P, R, S, F, C = State.PENDING, State.RUNNING, State.SUCCESS, State.FAILED, State.CANCELED
BOUND = 60.0  # backstop for waits that end in milliseconds; a busy machine never gets near it
EXPECTED_MOVES = {(P, R), (P, C), (R, P), (R, S), (R, F), (R, C)}


@pytest.fixture
def db(tmp_path):
    return tmp_path / "tasks.db"


@pytest.fixture
def store(db):
    s = Store.open(db)
    yield s
    s.close()


# ---------------------------------------------------------------- state machine

def test_transition_table_is_exactly_the_documented_one():
    for src in State:
        for dst in State:
            if (src, dst) in EXPECTED_MOVES:
                assert transit(src, dst) is dst
            else:
                with pytest.raises(IllegalTransition) as info:
                    transit(src, dst)
                assert (info.value.src, info.value.dst) == (src, dst)
    assert TERMINAL == {S, F, C}
    assert all(not ALLOWED[state] for state in TERMINAL)


def test_mark_refuses_an_illegal_move_and_leaves_the_row(store):
    task = store.submit("http://x/", b"{}", "k")
    with pytest.raises(IllegalTransition):
        store.mark(task.id, S)  # pending -> success skips running
    assert store.get(task.id) == task
    with pytest.raises(KeyError):
        store.mark("no-such-id", C)


# ---------------------------------------------------------------- retry policy

@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_stays_between_half_the_ceiling_and_the_ceiling(attempt):
    policy = Backoff(base_s=0.1, cap_s=2.0)
    ceiling = min(2.0, 0.1 * 2 ** (attempt - 1))
    assert policy.delay(attempt, rand=lambda: 0.0) == pytest.approx(ceiling / 2)
    assert policy.delay(attempt, rand=lambda: 0.999999) == pytest.approx(ceiling, rel=1e-5)
    samples = [policy.delay(attempt) for _ in range(100)]
    assert all(ceiling / 2 <= s <= ceiling for s in samples)
    assert len(set(samples)) > 90  # jittered: almost never the same value twice


def test_backoff_grows_then_stops_at_the_cap():
    policy = Backoff(base_s=0.2, cap_s=1.0)
    tops = [policy.delay(n, rand=lambda: 1.0) for n in range(1, 8)]
    assert tops[:4] == pytest.approx([0.2, 0.4, 0.8, 1.0])
    assert max(tops) == pytest.approx(1.0)


@pytest.mark.parametrize("status, exc, retry", [
    (400, None, False), (404, None, False), (429, None, False),
    (500, None, True), (503, None, True),
    (None, DownstreamTimeout("slow"), True), (None, DownstreamUnavailable("refused"), True),
    (None, TimeoutError(), True), (None, ValueError("bug"), False),
])
def test_classify_sorts_outcomes(status, exc, retry):
    plan = classify(status, exc, attempt=1, max_attempts=3, backoff=Backoff(base_s=0.01, cap_s=0.01))
    assert plan.retry is retry
    assert (plan.delay_s > 0) is retry


def test_classify_stops_at_max_attempts_counting_the_first_call():
    assert classify(503, None, attempt=2, max_attempts=3).retry
    last = classify(503, None, attempt=3, max_attempts=3)
    assert not last.retry and "3 of 3" in last.reason


# ---------------------------------------------------------------- store

def test_wal_mode_is_on_and_persists_in_the_file(db, store):
    store.submit("http://x/", b"{}", "k")
    assert Path(f"{db}-wal").exists()
    other = sqlite3.connect(db)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()


def test_same_key_same_task_while_live_refused_after_terminal(store):
    first = store.submit("http://x/", b"{}", "k", 3)
    assert store.submit("http://x/", b"{}", "k", 3).id == first.id
    store.claim_one()
    assert store.submit("http://x/", b"{}", "k", 3).id == first.id  # running is still live
    store.mark(first.id, C)
    with pytest.raises(IdempotencyConflict) as info:
        store.submit("http://x/", b"{}", "k", 3)
    assert info.value.task.id == first.id and info.value.task.state is C
    assert store.count() == 1


def test_concurrent_submits_on_two_connections_make_one_row(db):
    stores = [Store.open(db) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    ids = []

    def submit(s):
        barrier.wait(BOUND)
        ids.append(s.submit("http://x/", b"{}", "shared", 3).id)

    threads = [threading.Thread(target=submit, args=(s,)) for s in stores]
    for th in threads:
        th.start()
    for th in threads:
        th.join(BOUND)
    try:
        assert not any(th.is_alive() for th in threads)
        assert len(ids) == 4 and len(set(ids)) == 1
        assert stores[0].count() == 1
    finally:
        for s in stores:
            s.close()


def test_claim_one_is_exclusive_across_two_connections(db):
    setup = Store.open(db)
    all_ids = {setup.submit("http://x/", b"{}", f"k{i}").id for i in range(200)}
    setup.close()
    stores = [Store.open(db), Store.open(db)]
    claimed: list[list[str]] = [[], []]

    def drain(i):
        while (task := stores[i].claim_one()) is not None:
            assert task.state is R and task.attempt == 1
            claimed[i].append(task.id)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(BOUND)
    try:
        assert not any(th.is_alive() for th in threads)
        together = claimed[0] + claimed[1]
        assert len(together) == len(set(together)) == 200  # nobody claimed a task twice
        assert set(together) == all_ids
        assert stores[0].count(R) == 200
    finally:
        for s in stores:
            s.close()


def test_claim_respects_not_before_and_order(store):
    a = store.submit("http://x/", b"{}", "a")
    b = store.submit("http://x/", b"{}", "b")
    got = store.claim_one()
    assert got.id == a.id
    store.mark(a.id, P, error="http_503", not_before=got.started_at + 100)
    assert store.claim_one().id == b.id       # a is backing off
    assert store.claim_one() is None
    assert store.claim_one(now=got.started_at + 101).id == a.id


def test_recover_stale_running_honours_the_threshold_and_the_attempt_cap(store):
    live = store.submit("http://x/", b"{}", "live", 3)
    last = store.submit("http://x/", b"{}", "last", 1)
    store.claim_one()
    store.claim_one()
    assert store.recover_stale_running(older_than_s=600) == {}  # both started a moment ago
    moved = store.recover_stale_running(older_than_s=0)
    assert moved == {live.id: P, last.id: F}  # no attempt left for the one with max_attempts=1
    assert store.get(live.id).attempt == 1    # the interrupted call still counts


def test_schema_rejects_an_unknown_state(tmp_path):
    conn = connect(tmp_path / "x.db")
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO tasks (id, state, url, body, idempotency_key, max_attempts, not_before, "
                         "created_at, updated_at) VALUES ('i', 'done', 'u', x'', 'k', 1, 0, 0, 0)")
    finally:
        conn.close()


# ---------------------------------------------------------------- worker and logs

def test_worker_retries_a_503_and_logs_the_fields(store):
    down = FakeDownstream([DownResponse(503, b"busy"), DownResponse(200, b"ok")])
    worker = Worker(store, down, poll_interval=0.005, backoff=Backoff(base_s=0.001, cap_s=0.002))
    task = store.submit("http://x/", b"{}", "k", 3)

    async def run():
        loop = asyncio.create_task(worker.run_forever())
        deadline = time.monotonic() + BOUND
        while not store.get(task.id).terminal and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await worker.stop()
        await loop

    with capture() as records:
        asyncio.run(run())
    final = store.get(task.id)
    assert (final.state, final.attempt, final.result, down.calls) == (S, 2, b"ok", 2)
    mine = [r for r in records if r.get("task_id") == task.id]
    assert [r["event"] for r in mine] == ["task_start", "task_retry", "task_start", "task_done"]
    for record in mine:
        assert {"task_id", "state", "attempt", "duration_ms"} <= record.keys()
    assert mine[1]["reason"] == "http_503" and mine[1]["http_status"] == 503
    assert mine[3]["state"] == "success" and mine[3]["http_status"] == 200


def test_claim_query_uses_the_index_without_sorting_the_queue(db):
    statements = []
    conn = connect(db)  # the store over a connection we watch (Store takes any connection)
    conn.set_trace_callback(statements.append)
    store = Store(conn)
    try:
        store.submit("http://x/", b"{}", "k")
        store.claim_one()
    finally:
        conn.set_trace_callback(None)
    select = next(s for s in statements if s.lstrip().upper().startswith("SELECT ID FROM TASKS WHERE STATE"))
    reader = sqlite3.connect(db)  # the plan, read through a connection of its own
    try:
        plan = " | ".join(row[3] for row in reader.execute("EXPLAIN QUERY PLAN " + select))
    finally:
        reader.close()
    store.close()
    assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, plan
