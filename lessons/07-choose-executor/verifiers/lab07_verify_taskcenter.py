"""Verifier for lesson 07's durable single-process task center (the taskcenter/ package), run as a judge.

07.5  transit() refuses illegal moves and the store enforces them; one idempotency key gives one
      row and one downstream call while the task lives (two connections submitting at once
      included), and is refused once the task has finished
07.6  retries against a real loopback server through httpx2: 503 then 200 -> success at attempt 2;
      400 -> failed after one call; 500/502/503 with max_attempts=3 -> failed after exactly 3 calls
      (a 4th would have succeeded); a refused connection is retried; a call the client gives up on
      (the server saw it hang up) is retried as a timeout; backoff stays within its jittered, capped
      bounds; the retry log line carries the structured fields
07.7  cancel at the three layers: pending (never called), claimed but not yet called (skipped),
      in flight -- httpx2.AsyncClient: the server sees the connection closed and never answers;
      blocking client in a thread: the request runs to its end and the result is discarded
07.8  `python -m taskcenter.main serve` is SIGKILLed while its task waits on a slow loopback
      server; a restart with the default threshold leaves the (young) running row alone, a
      restart with --stale-after 0 moves it back to pending and it completes at attempt 2
07.9  24 tasks: the first N=4 calls meet at a barrier in the server (so N really run at once), and a
      counter on the worker's side of the port never sees more than N
07.10 the FastAPI app under starlette's TestClient: 202 + Location, GET of it, 404s for unknown ids,
      and 422 with a readable message and no new row for bad bodies

The judge never imports taskcenter: the package runs in a probe, driven step by step through
lab07_learner_taskcenter.py (each step answers with plain data).  What the judge can see, it reads itself: the
SQLite file (sqlite3), what the downstream saw (lab07_loopback.py, a server thread of this process on a free
127.0.0.1 port) and 07.8's `python -m taskcenter.main serve` processes, which it starts and kills.  Retries
are fast by configuration (nothing waits out a real delay); a call times out only where a check means it to,
elsewhere the call timeout is far above any loopback answer, so a busy machine cannot turn an answer into a
retry.  Held requests end by facts (the release, the client hanging up), never by how long they took.  Logs
go to the log folder (shared/logs.py); the helpers are in lab07_taskcenter_fixture.py.
"""

from __future__ import annotations

import json
from collections import Counter

from lab07_loopback import HOLD_CAP, Loopback
from lab07_taskcenter_fixture import (BOUND, CALL_TIMEOUT, PROBE, SLACK, WORK, all_final, ask, cancel_in_flight,
                                      captured, events_of, fresh_db, learner, opened, query, row_count, serve,
                                      stored_tasks, until, working)
from shared.events import short
from shared.i18n import t
from shared.proc import Process, free_port, wait_until
from shared.tap import Check, run

TASKCENTER = WORK / "taskcenter" / "__init__.py"
LAB: Loopback | None = None  # the loopback downstream: started in main, before the checks


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it (all but 07.10 call the loopback downstream LAB)."""
    return [
        Check("07.5", lambda c: check_state_and_idempotency(c, LAB), "taskcenter in the probe; loopback; sqlite files"),
        Check("07.6", lambda c: check_retries(c, LAB), "taskcenter in the probe; loopback; sqlite file"),
        Check("07.7", lambda c: check_cancel(c, LAB), "taskcenter in the probe; loopback; sqlite files"),
        Check("07.8", lambda c: check_crash_recovery(c, LAB), "python -m taskcenter.main serve, killed and restarted"),
        Check("07.9", lambda c: check_concurrency(c, LAB), "taskcenter in the probe; loopback; sqlite file"),
        Check("07.10", check_http, "taskcenter's FastAPI app under TestClient in the probe; sqlite file"),
    ]


# ---------------------------------------------------------------- 07.5

def check_state_and_idempotency(c, lab: Loopback) -> None:
    ask("load")
    moves = [("success", "pending"), ("failed", "running"), ("canceled", "pending"), ("pending", "success")]
    for src, dst in moves:
        assert ask("transit", src, dst)["illegal"], t("transit({src} -> {dst}) did not raise IllegalTransition",
                                                      src=src, dst=dst)
    for src in ("success", "failed", "canceled"):
        out = ask("ways_out", src)
        assert not out, t("terminal {src} must have no way out: {out}", src=src, out=out)
    retry = ask("transit", "running", "pending")
    assert retry.get("value") == "pending", t("running -> pending (a retry) must be allowed")
    c.note(t("refused transitions: {refused}", refused=", ".join(f"{src}->{dst}" for src, dst in moves)))

    url = lab.script("idem", [200])
    with opened("idempotency.db", sessions=2) as (path, *stores):  # two connections to one file
        # Two connections submit the same key at the same moment.
        got = ask("submit_together", stores, url, b'{"n": 1}', "same-key", 3, timeout=3 * BOUND + SLACK)
        assert all(got), t("the concurrent submits did not finish")
        ids = set(got)
        rows = row_count(path)
        assert len(ids) == 1 and rows == 1, t("two concurrent submits of one key gave {n_ids} ids and {rows} rows; "
                                              "expected one id, one row (the idempotency key needs UNIQUE)", rows=rows,
                                              n_ids=len(ids))
        tid = ids.pop()
        again = ask("submit", stores[1], url, b'{"n": 1}', "same-key", 3)
        assert again["id"] == tid, t("resubmitting while live must return the same id {tid}, got {id}", tid=tid,
                                     id=again['id'])
        c.note(t("two connections submitting same-key at once → one id {tid}, 1 row; a third submit returns it too",
                 tid=short(tid)))

        store = stores[0]
        with working(store):
            until(lambda: all_final(path, [tid]), BOUND, "the task to finish")
        final = stored_tasks(path, [tid])[tid]
        calls = lab.snapshot("idem")["calls"]
        assert final["state"] == "success", t("the task should succeed, got {state} ({error})", state=final['state'],
                                              error=final['error'])
        assert calls == 1, t("the downstream was called {calls} times, expected once", calls=calls)
        late = ask("try_submit", store, url, b'{"n": 1}', "same-key", 3)
        assert "refused" in late, t("after the task finished (success) the same key was accepted again: id {id} "
                                    "({state})", id=late["task"]['id'], state=late["task"]['state'])
        c.note(t("submitting the key again after success is refused: {refused}", refused=late['refused']))
        assert row_count(path) == 1 and lab.snapshot("idem")["calls"] == 1, t(
            "after the refusal there must still be one row and one call")
        assert ask("try_mark", store, tid, "pending"), t(
            "store.mark moved success back to pending: a terminal state must stay")
        assert stored_tasks(path, [tid])[tid]["state"] == "success", t("the refused mark changed the row")
        c.note(t("the downstream saw {calls} call; store.mark(success → pending) raised IllegalTransition, row "
                 "unchanged", calls=calls))


# ---------------------------------------------------------------- 07.6

def check_retries(c, lab: Loopback) -> None:
    ask("load")
    # Backoff: bounded by the cap, jittered, growing.
    policy = ask("backoff", 0.2, 1.0, 8, 6, 200)
    for attempt, (low, high) in enumerate(policy["bounds"], start=1):
        ceiling = min(1.0, 0.2 * 2 ** (attempt - 1))
        assert ceiling / 2 - 1e-9 <= low <= high <= ceiling + 1e-9, t(
            "backoff after attempt {attempt} spans [{low:.3f}, {high:.3f}], outside [{ceiling:.3f}, {ceiling2:.3f}]",
            attempt=attempt, low=low, high=high, ceiling=ceiling / 2, ceiling2=ceiling)
    samples = policy["samples"]
    assert max(samples) <= 1.0 + 1e-9, t("backoff above the 1.0 cap: {max:.3f}", max=max(samples))
    assert len({round(s, 6) for s in samples}) > 50, t("backoff has no jitter: one attempt always gives one value")
    c.note(t("backoff (base 0.2, cap 1.0): attempt 1 {middle:.3f}s, attempt 6: 200 samples in [{min:.3f}, {max:.3f}]",
             middle=policy["middle"], min=min(samples), max=max(samples)))

    cases = {
        # name: (script, max_attempts, expected state, expected attempt/calls)
        "r503": ([503, 200], 3, "success", 2),
        "r400": ([400, 200], 5, "failed", 1),
        "r5xx": ([500, 502, 503, 200], 3, "failed", 3),
    }
    with opened("retry.db") as (db, store):
        ids = {}
        for name, (plan, max_attempts, _, _) in cases.items():
            ids[name] = ask("submit", store, lab.script(name, plan), b"{}", f"retry-{name}", max_attempts)["id"]
        refused_url = f"http://127.0.0.1:{free_port()}/nobody-listens"
        ids["refused"] = ask("submit", store, refused_url, b"{}", "retry-refused", 2)["id"]

        def run(wanted: list[str], call_timeout: float):
            """Work until these tasks are final: (id -> stored task, id -> why it was retried, the log records)."""
            with captured(store) as records, working(store, call_timeout=call_timeout):
                until(lambda: all_final(db, wanted), BOUND, "the retry scenarios to finish")
            reasons = {tid: [r.get("reason") for r in events_of(records, tid, "task_retry")] for tid in wanted}
            return stored_tasks(db, wanted), reasons, records

        tasks, retried, records = run(list(ids.values()), CALL_TIMEOUT)
        problems = []
        for name, (plan, max_attempts, want_state, want) in cases.items():
            task = tasks[ids[name]]
            calls = lab.snapshot(name)["calls"]
            c.note(t("{name}: {plan} max_attempts={max_attempts} → {state}, attempt {attempt}, {calls} call(s), "
                     "retried after {retried}, error={error!r}", name=name, plan=plan, max_attempts=max_attempts,
                     state=task['state'], attempt=task['attempt'], calls=calls, retried=retried[ids[name]],
                     error=task['error']))
            if task["state"] != want_state or task["attempt"] != want or calls != want:
                problems.append(t("{name}: expected {want_state} at attempt {want} with {want} calls; got {state} at "
                                  "attempt {attempt} with {calls} calls", name=name, want_state=want_state, want=want,
                                  state=task['state'], attempt=task['attempt'], calls=calls))
        refused = tasks[ids["refused"]]
        c.note(t("refused connection, max_attempts=2 → {state}, attempt {attempt}, retried after {retried}, "
                 "error={error!r}", state=refused['state'], attempt=refused['attempt'], retried=retried[ids["refused"]],
                 error=refused['error']))
        if refused["state"] != "failed" or refused["attempt"] != 2:
            problems.append(t("a refused connection should be retried up to 2 attempts then fail; got {state} at "
                              "attempt {attempt}", state=refused['state'], attempt=refused['attempt']))

        # The timeout case runs on its own, with a short call timeout: its first call is held until the
        # client gives up.  The status cases above keep a call timeout no loopback answer comes near.
        timeout_id = ask("submit", store, lab.script("rtimeout", ["hold", 200]), b"{}", "retry-rtimeout", 5)["id"]
        tasks, reasons, _ = run([timeout_id], 2.0)
        task, snap, retried = tasks[timeout_id], lab.snapshot("rtimeout"), reasons[timeout_id]
        c.note(t("rtimeout: ['hold', 200] call_timeout=2 max_attempts=5 → {state}, attempt {attempt}, {calls} "
                 "call(s), the server saw {outcomes}, retried after {retried}", state=task['state'], retried=retried,
                 attempt=task['attempt'], calls=snap['calls'], outcomes=snap['outcomes']))
        # Facts, not durations: the held call can only end by the client hanging up (the server saw it),
        # that attempt was retried, and the task then succeeded with one attempt per call.  (On a very busy
        # machine a later call may time out too; it is then retried like the first.)
        if not (task["state"] == "success" and "client_closed" in snap["outcomes"]
                and task["attempt"] == snap["calls"] >= 2 and retried):
            problems.append(t("rtimeout: the first call hangs until the client gives up; it should be retried as a "
                              "timeout and then succeed (one attempt per call); got {state} at attempt {attempt} "
                              "with {calls} calls, retried after {retried}", state=task['state'], calls=snap['calls'],
                              attempt=task['attempt'], retried=retried))
        assert not problems, "\n".join(problems)
        retry_lines = events_of(records, ids["r503"], "task_retry")
        assert retry_lines, t("no task_retry log line after the 503")
        line = retry_lines[0]
        missing = [k for k in ("task_id", "state", "attempt", "duration_ms", "reason", "http_status") if k not in line]
        assert not missing, t("the task_retry log line lacks {missing}: {line}", missing=missing, line=line)
        c.note(t("log: ") + json.dumps({k: line[k] for k in line if k != "ts"}, ensure_ascii=False))


# ---------------------------------------------------------------- 07.7

def check_cancel(c, lab: Loopback) -> None:
    ask("load")
    # Layers 1 and 2 share one worker with a single slot, so tasks run strictly in order and a
    # sentinel submitted last proves the worker went past the canceled ones.  The probe's store cancels
    # the task named by cancel_after_claim right after claiming it: a cancel request that lands between
    # the claim and the downstream call.
    with opened("cancel-layers.db", True) as (db, store):
        with captured(store) as records:
            with working(store, concurrency=1, run=False):
                pending = ask("submit", store, lab.url("c-pending"), b"{}", "c-pending", 3)
                claimed = ask("submit", store, lab.url("c-claimed"), b"{}", "c-claimed", 3)
                ask("cancel_after_claim", store, claimed["id"])
                sentinel = ask("submit", store, lab.url("c-sentinel"), b"{}", "c-sentinel", 3)
                got = ask("cancel", store, pending["id"])["task"]  # layer 1: before any claim
                assert got["state"] == "canceled", t("after canceling a pending task its state is {state}",
                                                     state=got['state'])
                ask("run_worker", store)
                until(lambda: all_final(db, [sentinel["id"]]), BOUND, "the sentinel task to finish")
        rows = stored_tasks(db, [pending["id"], claimed["id"], sentinel["id"]])
        p, k, s = (rows[task["id"]] for task in (pending, claimed, sentinel))
        p_calls, k_calls = lab.snapshot("c-pending")["calls"], lab.snapshot("c-claimed")["calls"]
        assert s["state"] == "success", t("the sentinel should succeed, got {state}", state=s['state'])
        assert p["state"] == "canceled" and p["attempt"] == 0 and p_calls == 0, t(
            "cancel while pending: expected canceled, attempt 0, 0 calls; got {state}, attempt {attempt}, {p_calls} "
            "calls", state=p['state'], attempt=p['attempt'], p_calls=p_calls)
        c.note(t("layer 1 (pending): canceled, never claimed, 0 calls"))
        assert k["state"] == "canceled" and k_calls == 0, t(
            "cancel after claim, before the call: expected canceled with 0 calls; got {state} with {k_calls} calls — "
            "re-read the state at the start of the run and skip a canceled task", state=k['state'], k_calls=k_calls)
        assert k["result"] is None, t("a result was written for the canceled task")
        skipped = [r["event"] for r in events_of(records, claimed["id"])]
        c.note(t("layer 2 (claimed, not called yet): attempt {attempt}, 0 calls, log {skipped}", attempt=k['attempt'],
                 skipped=skipped))

    # Layer 3, async client: the server must see the connection close and never answer.
    with opened("cancel-inflight.db") as (db, store):
        task, snap, cancel_s, events, _ = cancel_in_flight(lab, store, db, "async")
        assert snap["outcomes"] == ["client_closed"], t("async downstream: the server should see the connection "
                                                        "closed and never answer, got {outcomes} — the request "
                                                        "stayed on the server after cancel returned, until the "
                                                        "server answered at its {hold_cap:g} s cap. Changing the row "
                                                        "does not stop an in-flight request; cancel the asyncio task "
                                                        "that awaits the downstream", outcomes=snap['outcomes'],
                                                        hold_cap=HOLD_CAP)
        assert task["state"] == "canceled" and task["result"] is None, t(
            "after cancel the row is {state} with result={result!r}; expected canceled, no result",
            state=task['state'], result=task['result'])
        assert "task_interrupted" in events, t("no task_interrupted in the log: {events}", events=events)
        c.note(t("layer 3 httpx2.AsyncClient: cancel returned in {cancel_s:.0f} ms, the server saw {outcomes}, row "
                 "canceled with result=None, log {events}", cancel_s=cancel_s * 1000, outcomes=snap['outcomes'],
                 events=events))

        task, snap, cancel_s, _, (still, discarded) = cancel_in_flight(lab, store, db, "thread")
        assert still["active"] == 1 and not still["outcomes"], t(
            "thread downstream: when cancel returned the request should still be running on the server (a thread "
            "cannot be interrupted), got {still}", still=still)
        assert snap["outcomes"] == ["answered 200"], t("after the release the server should answer 200, got "
                                                       "{outcomes}", outcomes=snap['outcomes'])
        assert task["state"] == "canceled" and task["result"] is None, t(
            "after the threaded request completed the row is {state} with result={result!r}: the late result must be "
            "discarded", state=task['state'], result=task['result'])
        c.note(t("layer 3 blocking client in a thread: cancel returned in {cancel_s:.0f} ms with the request still "
                 "running; released, the server {outcomes}, the result was discarded {discarded}x, row still "
                 "canceled with result=None", cancel_s=cancel_s * 1000, outcomes=snap['outcomes'], discarded=discarded))


# ---------------------------------------------------------------- 07.8

def check_crash_recovery(c, lab: Loopback) -> None:
    ask("load")  # a package that does not import fails here, said as such, before any server starts
    import httpx2  # the kit's client: this process asks the servers it started

    db = fresh_db("crash.db")
    url = lab.script("crash", ["hold"])  # the first call hangs; later calls answer 200 at once
    started: list[Process] = []

    def start(stale_after: float, n: int) -> tuple[Process, str]:
        """Server n on the file, ready (its recovery done): the process and its /tasks URL."""
        port = free_port()
        started.append(serve(db, port, stale_after, f"crash-{n}.log"))
        return started[-1], f"http://127.0.0.1:{port}/tasks"

    def get(tasks, tid):
        return httpx2.get(f"{tasks}/{tid}", timeout=BOUND).json()

    try:
        first, tasks = start(600, 1)
        reply = httpx2.post(tasks, json={"url": url, "payload": {"order": 7}, "idempotency_key": "crash-1"},
                            timeout=BOUND)
        # (202 itself is 07.10's business; here any success with an id will do)
        assert reply.is_success and "id" in reply.json(), t(
            "POST /tasks failed: {status_code} {text}", status_code=reply.status_code, text=reply.text[:200])
        tid = reply.json()["id"]
        wait_until(lambda: lab.snapshot("crash")["active"] == 1 and get(tasks, tid)["state"] == "running", BOUND,
                   "the task to be running with its call in flight")
        first.kill()  # SIGKILL: no shutdown, no finally
        found = query(db, "SELECT state, attempt, (SELECT journal_mode FROM pragma_journal_mode) AS journal_mode "
                          "FROM tasks WHERE id = ?", (tid,))
        row = dict(found[0]) if found else {}
        c.note(t("pid {pid} got SIGKILL mid-call; on disk: {row}", pid=first.pid, row=row))
        assert row.get("state") == "running" and row.get("journal_mode") == "wal", t(
            "after the crash the file should hold a running row (WAL mode), got {row}", row=row)
        wait_until(lambda: lab.snapshot("crash")["outcomes"], HOLD_CAP + BOUND, "the server to notice the dead client")

        second, tasks = start(600, 2)
        young = get(tasks, tid)
        second.stop()
        assert young["state"] == "running", t("restarted with the default threshold (600 s), a task that just "
                                              "started must not be recovered; got {state}", state=young['state'])
        c.note(t("restart with the default 600 s threshold: still running (it might be alive, not ours to take)"))

        third, tasks = start(0, 3)
        right_after = get(tasks, tid)  # recovery ran in the startup, before the port opened
        assert (right_after["state"], right_after["attempt"]) != ("running", 1), t(
            "after a restart with --stale-after 0 the task is still running its first attempt: startup did not call "
            "recover_stale_running, or it did not move the stale task back to pending")
        final = wait_until(lambda: (lambda r: r if r["state"] in ("success", "failed", "canceled") else None)(
            get(tasks, tid)), BOUND, "the recovered task to finish")
        recovered = [line for line in third.log_text().splitlines() if '"task_recovered"' in line and tid in line]
        for line in recovered:
            c.note(line)
        assert not recovered or '"pending"' in recovered[0], t(
            "the stale task was recovered into something other than pending: {recovered} — work a crash interrupted "
            "goes back to the queue, it is not a failure", recovered=recovered[0] if recovered else '')
        assert recovered, t("after a restart with --stale-after 0 the log has no task_recovered line moving it to "
                            "pending:\n{log_tail}", log_tail=third.log_tail(8))
        calls = lab.snapshot("crash")["calls"]
        assert final["state"] == "success" and final["attempt"] == 2 and calls == 2, t(
            "after recovery the task should succeed at attempt 2 (2 downstream calls); got {state}, attempt "
            "{attempt}, {calls} calls, error={error!r}", state=final['state'], attempt=final['attempt'], calls=calls,
            error=final.get('error'))
        keys = set(lab.keys["crash"])
        c.note(t("restart with --stale-after 0: running → pending → success, attempt {attempt}, {calls} downstream "
                 "calls, both with Idempotency-Key {keys}", attempt=final['attempt'], calls=calls, keys=keys))
    finally:
        lab.release("crash")
        for proc in started:
            proc.stop()


# ---------------------------------------------------------------- 07.9

def check_concurrency(c, lab: Loopback) -> None:
    ask("load")
    limit, count = 4, 24
    with opened("concurrency.db") as (db, store):
        # The first N calls meet at a barrier in the server: it opens only while N calls are in flight at
        # once, which proves the worker really runs N side by side.  The rest take 50 ms each.
        lab.gather("slow", limit)
        url = lab.script("slow", ["gather"] * limit + [0.05] * (count - limit))
        ids = ask("submit_many", store, [(url, b"{}", f"conc-{i}", 3) for i in range(count)])
        # The probe's downstream counts the calls in flight on the worker's side of the port.
        with working(store, concurrency=limit, counting=True) as seen:
            until(lambda: all_final(db, ids), HOLD_CAP + BOUND, "all tasks to finish")
        peak, server, gathered = seen["peak"], lab.snapshot("slow"), lab.gathered["slow"]
        states = Counter(row["state"] for row in stored_tasks(db, ids).values())
        c.note(t("N={limit}, {count} tasks: the first {limit} calls met at the server's barrier ({gathered} passed), "
                 "the port-side counter saw at most {peak} at once (the server at most {peak2}), final states {dict}",
                 limit=limit, count=count, gathered=gathered, peak=peak, peak2=server['peak'], dict=dict(states)))
        # The bound is judged on the worker's side of the port: the server may still count a request
        # whose client already gave up while its retry begins.
        assert peak <= limit, t("{peak} downstream calls ran at once, above N={limit}: take a Semaphore slot before "
                                "claiming and give it back when the task ends", peak=peak, limit=limit)
        assert states == {"success": count}, t("all should succeed, got {dict}", dict=dict(states))
        assert gathered == limit, t("the server never had {limit} calls in at once (its barrier never opened): the "
                                    "worker does not run N calls side by side", limit=limit)


# ---------------------------------------------------------------- 07.10

def check_http(c) -> None:
    ask("load")
    db = fresh_db("api.db")

    good = {"url": "http://127.0.0.1:9/work", "payload": {"n": 1}, "idempotency_key": "http-1", "max_attempts": 3}
    # create_app(db, a FakeDownstream answering 200) behind a TestClient in the probe; only answers come here.
    with learner.app(str(db), opener=f"{PROBE}:open_api") as client:
        reply = client.post("/tasks", json=good)
        assert reply.status_code == 202, t("POST /tasks should answer 202, got {status_code} {text}",
                                           status_code=reply.status_code, text=reply.text[:200])
        tid = reply.json().get("id")
        location = reply.headers.get("location")
        assert tid and location == f"/tasks/{tid}", t("Location should be /tasks/{tid}, got {location!r}", tid=tid,
                                                      location=location)
        c.note(f"POST /tasks → 202, Location {location}")
        final = wait_until(lambda: (lambda b: b if b.get("state") == "success" else None)(client.get(location).json()),
                           BOUND, "the task to succeed")
        c.note(f"GET {location} → 200 state={final['state']} attempt={final['attempt']} result={final['result']!r}")
        for path, method in ((f"/tasks/{'0' * 32}", "get"), (f"/tasks/{'0' * 32}/cancel", "post")):
            missing = getattr(client, method)(path)
            assert missing.status_code == 404, t("{upper} {path} should answer 404, got {status_code}", path=path,
                                                 upper=method.upper(), status_code=missing.status_code)
        c.note(t("unknown id: GET and cancel both answer 404"))

        before = row_count(db)
        bad_cases = [
            (t("missing url"), {"json": {"payload": {}, "idempotency_key": "bad-1"}}, "url"),
            (t("url not a URL"), {"json": {**good, "url": "not a url", "idempotency_key": "bad-2"}}, "url"),
            ("ftp url", {"json": {**good, "url": "ftp://127.0.0.1/x", "idempotency_key": "bad-3"}}, "url"),
            (t("non-JSON body"), {"content": b'{"url": "http://127.0.0.1:9/work", ',
                               "headers": {"content-type": "application/json"}}, "json"),
            ("max_attempts=0", {"json": {**good, "max_attempts": 0, "idempotency_key": "bad-4"}}, "max_attempts"),
            ("max_attempts=11", {"json": {**good, "max_attempts": 11, "idempotency_key": "bad-5"}}, "max_attempts"),
        ]
        for label, kwargs, word in bad_cases:
            bad = client.post("/tasks", **kwargs)
            text = bad.text
            assert bad.status_code == 422, t("{label}: expected 422, got {status_code} {text}", label=label,
                                             status_code=bad.status_code, text=text[:200])
            assert word.lower() in text.lower(), t("{label}: the 422 message does not mention {word}: {text}",
                                                   label=label, word=word, text=text[:200])
            now = row_count(db)
            assert now == before, t("{label}: a rejected request stored {now} row(s)", label=label, now=now - before)
            message = bad.json().get("message") if isinstance(bad.json(), dict) else None
            c.note(f"{label} → 422 {message or text[:120]}")
        c.note(t("after 6 bad requests the table still holds {row_count} row(s)", row_count=row_count(db)))


# ---------------------------------------------------------------- main

def stop_all() -> None:
    try:
        LAB.stop()
    finally:
        learner.stop()


if __name__ == "__main__":
    if not TASKCENTER.exists():
        # The task center is the kit's own design study beside the curriculum: a folder without it has not
        # taken up this extension (the reference always has it).
        run(checks(), skip_all=t("extension not taken up: no taskcenter/ package in the folder (see the "
                                 "lesson's reference)"))
    LAB = Loopback()
    run(checks(), teardown=stop_all)
