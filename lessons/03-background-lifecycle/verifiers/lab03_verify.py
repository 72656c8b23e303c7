"""Verifier for lesson 03: who owns background work, and what a crash takes with it.

03.1  a real uvicorn runs the learner's api_background app; POST /exports/background answers 202,
      the job reads running while its work is held, and succeeded with result.rows == 2 once released
03.2  python registry_demo.py prints cleanup before remaining 0 and leaves no task behind
03.3  task_registry.start with a failing coroutine: the task is in `running` while it runs, the done
      callback logs the ValueError, `running` empties, and asyncio never says "exception was never
      retrieved"
03.4  restart drill: a job is queryable, the server gets SIGKILL, a new process starts on
      the same port, and the old id answers 404 -- the loss boundary of in-memory jobs
03.5  exercise (the course's): registry_demo.py made to raise ValueError in a task it started -- the done
      callback logs it, `running` is empty at the end, nothing says "never retrieved".  Judged from what
      the demo's tasks did (lab03_demo.py wraps task_registry.start): no task raising ValueError = not
      attempted

uvicorn runs `lab03_app:app` (see there): the export's work is held while 03.1 looks, so "running" is seen
while the work is provably under way, and a blocked event loop is written down.  While 03.1 waits, a blocked
loop or an exception in the server's log after the response ends the wait at once, with the cause.  03.4
reuses 03.1's uvicorn when both run.  Server logs and handshake files go to the log folder (shared/logs.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

from shared import handshake, probe_report
from shared.i18n import t
from shared.location import location_target
from shared.logs import LOG_DIR
from shared.proc import Process, WaitTimeout, start_uvicorn, wait_until
from shared.tap import Check, exception_lines, once, run

WORK = Path.cwd()
APP = "lab03_app:app"  # the learner's api_background:app, its export's wait held (see above)
TERMINAL = {"succeeded", "failed", "cancelled"}
BOUND = 30.0  # backstop for waits that facts end in well under a second


def checks() -> list[Check]:
    return [
        Check("03.1", check_background, "uvicorn lab03_app:app; handshake files"),
        Check("03.2", check_registry_demo, "python lab03_demo.py registry_demo.py (once per run)"),
        Check("03.3", check_failure_logged, "python lab03_failing_task.py"),
        Check("03.4", check_restart, "uvicorn (03.1's, or a fresh one), SIGKILLed and restarted"),
        Check("03.5", check_exercise, "python lab03_demo.py registry_demo.py (03.2's run)"),
    ]


def _short(response) -> str:
    return f"{response.status_code} {response.text[:300]}"


def _log_tail(proc: Process, lines: int = 10) -> list[str]:
    """The end of a server's log without the access lines, where a background error shows up."""
    kept = [line for line in proc.log_text().splitlines() if '" 200' not in line and '" 202' not in line]
    return [t("server log tail (access lines left out):"), *kept[-lines:]] if kept else []


class Servers:
    """The uvicorn processes this verifier started, each with its own handshake folder (`gate`: each counts
    its held sleeps from 1); every one is stopped by its PID at the end."""

    def __init__(self):
        self.started: list[tuple[Process, Path]] = []
        self.port: int | None = None
        self.gate: Path | None = None

    def start(self, log_name: str, port: int | None = None) -> tuple[Process, int]:
        gate = LOG_DIR / f"gate-{Path(log_name).stem}"
        shutil.rmtree(gate, ignore_errors=True)
        gate.mkdir(parents=True)
        os.environ["TASKLAB_EXPORT_GATE"] = str(gate)  # the server inherits it
        log = LOG_DIR / log_name
        log.unlink(missing_ok=True)  # Process appends; start every run with an empty log
        proc, port = start_uvicorn(APP, cwd=WORK, log_path=log, port=port, timeout=BOUND)
        self.started.append((proc, gate))
        self.port, self.gate = port, gate
        return proc, port

    def running(self) -> tuple[Process, int]:
        """03.1's server if it is still alive, else a fresh one."""
        proc = self.started[-1][0] if self.started else None
        return (proc, self.port) if proc and proc.alive() else self.start("uvicorn-first.log")

    def stop_all(self) -> None:
        for _, gate in self.started:
            handshake.stop(gate)  # a held sleep goes on at once
        for proc, _ in self.started:
            proc.stop()


SERVERS = Servers()


def _written(gate: Path, prefix: str) -> list[dict]:
    """The records lab03_app.py wrote whole (a file still being written has a .tmp name)."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(gate.glob(f"{prefix}-*"))
            if ".tmp" not in path.name]


def server_trouble(proc: Process, gate: Path, since: int) -> str | None:
    """A fact the server wrote down that ends a wait at once, as the reason to give: its event loop was
    blocked, or its log shows an exception (or a coroutine never awaited) after offset `since`."""
    return blocked_loop(gate) or logged_trouble(proc, since)


def blocked_loop(gate: Path) -> str | None:
    blocks = _written(gate, "blocking")
    if blocks:
        where = "; ".join(t("time.sleep({seconds}) at {place} in {function}()", seconds=b['seconds'], place=b['place'],
                            function=b['function']) for b in blocks[:2])
        return t("blocking call in async code: {where} ran on the event loop's thread -- while it ran, the server "
                 "ran no other task and answered no request. Use await asyncio.sleep(...); hand really blocking "
                 "calls to a thread (lesson 05).", where=where)
    stuck = _written(gate, "noyield")
    if stuck:
        return t("blocking call in async code: the job went from running to {target} without local_export ever "
                 "giving the event loop back -- while it worked, the server answered no request. Its wait must be an "
                 "await (await asyncio.sleep(1)), not a blocking call.", target=stuck[0]['target'])
    return None


def logged_trouble(proc: Process, since: int) -> str | None:
    log = proc.log_text()[since:]
    # A traceback counts once its exception line is written; a coroutine nobody awaited is its own line.
    errors = exception_lines(log)
    unawaited = [line.strip() for line in log.splitlines() if "was never awaited" in line]
    if not errors and not unawaited:
        return None
    error = errors[-1] if errors else unawaited[-1]
    if "must be callable" in log or "object is not callable" in log or "was never awaited" in log:
        source = (WORK / "api_background.py").read_text(encoding="utf-8", errors="replace")
        calls = [line.strip() for line in source.splitlines() if "add_task(" in line]
        yours = f" (`{calls[0]}`)" if calls else ""
        return t("api_background.py: add_task was given a call's result (a coroutine object), not the "
                 "function{yours}; the server log says: {error}. Pass the function and its arguments, not a call's "
                 "result: background.add_task(local_export, job_id).", yours=yours, error=error)
    return t("after the response the server log shows an exception: {error}. An error in background work cannot "
             "reach the client (the 202 is already sent); it only shows in the log: see the traceback at its end.",
             error=error)


def held_export(gate: Path, client, job_id: str, proc: Process, since: int):
    """Wait until the export's work is under way, as the gate files and the job say:
    ("held", name): its sleep runs after the response and waits for our go;
    ("inside", None): its sleep ran before the response was sent (the work ran inside the request);
    ("ended", None): the job ended without a sleep through api_background's asyncio (nothing to hold);
    ("trouble", reason): the server wrote down a blocked loop or an exception (see server_trouble)."""
    import httpx2

    def seen():
        trouble = server_trouble(proc, gate, since)
        if trouble:
            return "trouble", trouble
        for record in _written(gate, "seen-sleep"):
            if not record["after_response"]:
                return "inside", None
            if (gate / f"ready-{record['name']}").exists():
                return "held", record["name"]
        try:
            reply = client.get(f"/exports/{job_id}")
        except httpx2.TransportError:
            # An exception escaping a background task makes uvicorn drop that connection: ask again
            # on a fresh one (the log says why, at the next look).
            return None
        if reply.status_code == 200 and reply.json().get("status") in TERMINAL:
            return "ended", None
        return None
    return wait_until(seen, BOUND, "the export's work to start", interval=0.01)


# ---------------------------------------------------------------- 03.1

def check_background(c) -> None:
    import httpx2

    proc, port = SERVERS.start("uvicorn-first.log")
    gate = SERVERS.gate
    c.note(t("uvicorn {app} is up: pid {pid}, port {port}", app=APP, pid=proc.pid, port=port))
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        since = len(proc.log_text())  # the server's log from here on belongs to this export
        started = time.monotonic()
        response = client.post("/exports/background", json={"product_ids": [1, 2]})
        post_seconds = time.monotonic() - started
        assert response.status_code == 202, t("POST /exports/background must answer 202 (accepted, not done yet), "
                                              "got {response}", response=_short(response))
        body = response.json()
        job_id = body.get("id") if isinstance(body, dict) else None
        assert job_id, t("the 202 body carries no id: {text}", text=response.text[:200])
        location = response.headers.get("location")
        target = location_target(response)
        assert target is not None and urlsplit(target).path == f"/exports/{job_id}", t(
            "Location should lead to /exports/{job_id} (the path, or a full URL of this server), got {location!r}",
            job_id=job_id, location=location)
        c.note(t("POST answered 202 in {post_seconds:.0f} ms with status {status!r}, Location {location}",
                 post_seconds=post_seconds * 1000, status=body.get('status'), location=location))

        seen: list[str] = [body.get("status")]  # distinct statuses in the order we saw them
        last: dict = {}
        dropped: list[str] = []  # polls whose connection the server closed

        def poll() -> str | None:
            try:
                reply = client.get(target)  # as the server gave it (a path or a full URL of this server)
            except httpx2.TransportError as exc:
                # An exception escaping a background task makes uvicorn drop that connection;
                # poll again on a fresh one, unless the server itself is gone.
                assert proc.alive(), t("uvicorn exited while we were polling")
                dropped.append(f"{type(exc).__name__}: {exc}")
                return None
            assert reply.status_code == 200, t("polling GET {location} should answer 200, got {reply}",
                                               location=target, reply=_short(reply))
            last.clear()
            last.update(reply.json())
            status = last.get("status")
            if seen[-1] != status:
                seen.append(status)
            return status

        def server_log_notes() -> None:
            if dropped:
                c.note(t("{n_dropped} poll(s) found the connection closed by the server ({dropped})",
                         n_dropped=len(dropped), dropped=dropped[0]))
            for line in _log_tail(proc):
                c.note(line)

        try:
            where, name = held_export(gate, client, job_id, proc, since)
        except WaitTimeout:
            server_log_notes()
            raise AssertionError(t("the export never got under way (status {poll!r}): local_export was not "
                                   "scheduled, or it raised at a transition -- the response is already sent, so that "
                                   "error only shows in the server log.", poll=poll())) from None
        if where == "trouble":
            server_log_notes()
            raise AssertionError(name)
        assert where != "inside", t("the export's wait began before the response was sent (the POST took "
                                    "{post_seconds:.2f} s): the work ran inside the request and the client waited "
                                    "for it. Register it with background.add_task so it runs after the response.",
                                    post_seconds=post_seconds)
        if where == "held":
            during = poll()
            c.note(t("the export's work began after the response and is held by the verifier: GET now reads "
                     "{during!r}", during=during))
            assert during == "running", t("the job reads {during!r} while its work is under way: local_export must "
                                          "move to running when it starts.", during=during)
            handshake.go(gate, [name])
        else:
            c.note(t("the export does not wait through api_background's asyncio.sleep, so it cannot be held: judging "
                     "by what the polls saw"))
        trouble: list[str] = []

        def settled():
            terminal = poll() in TERMINAL
            # A blocked event loop is written down before it blocks, so it is seen even when the poll that
            # waited out the block already finds the job ended (the statuses between were never seen).
            trouble.append((blocked_loop(gate) if terminal else server_trouble(proc, gate, since)) or "")
            return terminal or bool(trouble[-1])

        try:
            wait_until(settled, BOUND, "a terminal status", interval=0.02)
        except WaitTimeout:
            server_log_notes()
            raise AssertionError(t("no terminal status after the release; statuses seen: {map}. local_export may "
                                   "have raised at a transition -- the response is already sent, so that error only "
                                   "shows in the server log.", map=' → '.join(map(str, seen)))) from None
        if trouble[-1]:  # settled() ran at least once
            server_log_notes()
            raise AssertionError(trouble[-1])
        c.note(t("statuses seen: {map}", map=' → '.join(map(str, seen))))

    assert "running" in seen, t("running was never observed. The work must go through background.add_task so it runs "
                                "after the response, and it must move to running when it starts.")
    if seen[-1] != "succeeded":
        for line in _log_tail(proc):
            c.note(line)
    assert seen[-1] == "succeeded", t("the export ended as {seen} (error={error!r}); it should succeed", seen=seen[-1],
                                      error=last.get('error'))
    order = ["queued", "running", "succeeded"]
    assert all(s in order for s in seen) and seen == sorted(seen, key=order.index), t(
        "statuses out of order: {map} (expected queued → running → succeeded)", map=' → '.join(map(str, seen)))
    result = last.get("result")
    rows = result.get("rows") if isinstance(result, dict) else None
    assert rows == 2, t("result should be {{'rows': 2}} (two product ids), got {result!r}", result=result)
    c.note(t("final record: status=succeeded, result={result}", result=result))


# ---------------------------------------------------------------- 03.2

def not_registered() -> str:
    """What is wrong when start() did not put a task into running (03.2, 03.3 and 03.5 all check it)."""
    return t("task_registry.py: start() did not put the task into running (running.add(task)) -- nothing holds a "
             "strong reference to it, so registry_demo.py finds nothing to wait for or cancel, and it is only "
             "cancelled when asyncio.run tears the loop down. Fix start() in task_registry.py first.")


def helper_run(args: list[str], late: str) -> probe_report.Ran:
    """A kit helper run in the work folder (shared/probe_report.py).  `late`: the reason to fail with when it does
    not end within BOUND."""
    ran = probe_report.run(args, LOG_DIR, Path(args[0]).stem, BOUND, WORK)
    assert ran.code is not None, late
    return ran


@once
def demo_run() -> dict:
    """`python registry_demo.py`, run by lab03_demo.py (its tasks seen)."""
    started = time.monotonic()
    ran = helper_run(["lab03_demo.py", "registry_demo.py"], t(
        "registry_demo.py did not end within {bound:g} s (it should take about 3 s): after the grace window cancel "
        "what is left, then gather it so it can leave.", bound=BOUND))
    run = ran.report
    assert run is not None, t("running registry_demo.py gave no result:\n{stdout}", stdout=ran.output[-800:])
    run["output"] = ran.output
    run["seconds"] = time.monotonic() - started
    return run


def check_registry_demo(c) -> None:
    run = demo_run()
    out = run["output"]
    lines = [line.strip() for line in out.splitlines()]
    c.note(t("python registry_demo.py took {seconds:.1f} s, outcome {outcome}, output:", seconds=run['seconds'],
             outcome=run['outcome']))
    c.note_lines(out, last=12)

    assert all(task["registered"] for task in run["started"]), not_registered()
    assert run["outcome"] == "ok", t("registry_demo.py should end cleanly, got {outcome}", outcome=run['outcome'])
    assert "cleanup" in lines, t("cleanup was never printed: work's finally did not run (the task was not cancelled "
                                 "and awaited to its end).")
    remaining = [i for i, line in enumerate(lines) if line.startswith("remaining")]
    assert remaining, t("no remaining N line was printed.")
    last = remaining[-1]
    assert lines[last] == "remaining 0", t("the last count was {lines!r}: a task is still in running — the done "
                                           "callback must remove it, and the count must come after gather has "
                                           "awaited the cancelled tasks.", lines=lines[last])
    assert lines.index("cleanup") < last, t("cleanup came after remaining: nothing awaited the cancelled task, so "
                                            "its cleanup only ran when asyncio.run tore the loop down.")
    assert "Task was destroyed" not in out, t("the output says 'Task was destroyed': a task was not awaited to its "
                                              "end.")


# ---------------------------------------------------------------- 03.3

def check_failure_logged(c) -> None:
    ran = helper_run(["lab03_failing_task.py"], t(
        "the failing-task run did not end within {bound:g} s (does task_registry.start hand the coroutine to the "
        "loop?)", bound=BOUND))
    report = ran.report
    if ran.code != 0 or report is None:
        c.note_lines(ran.output, last=8)
        raise AssertionError(t("running a failing task through task_registry.start broke (exit code {returncode})",
                               returncode=ran.code))
    logged, loop_messages = report["logged"], report["loop"]
    assert report["registered"], not_registered()
    c.note(t("start(a coroutine that raises ValueError('drill-03') after 0.05 s)"))
    c.note(t("errors logged by the done callback: {logged}", logged=logged or t('none')))
    c.note(t("tasks left in running afterwards: {left}", left=report['left']))
    if loop_messages:
        c.note(t("asyncio's own reports: {loop_messages}", loop_messages=loop_messages))

    assert not any("Exception in callback" in m for m in loop_messages), t(
        "the done callback raised (Exception in callback): log inside the callback, never re-raise or call "
        "task.result() there.")
    assert any("ValueError" in m or "drill-03" in m for m in logged), t(
        "the ValueError was not logged with logging.error: observe must read task.exception() when the task was not "
        "cancelled, and log it.")
    assert report["left"] == 0, t("{left} task(s) stayed in running after the failure: observe must discard first, "
                                  "then deal with the exception.", left=report['left'])
    assert "never retrieved" not in ran.output, t("asyncio reported Task exception was never retrieved: observe "
                                                   "did not read the task's exception.")


# ---------------------------------------------------------------- 03.5 (the course's exercise)

def check_exercise(c) -> None:
    run = demo_run()
    raised = [task for task in run["started"] if task["ended"] == "ValueError"]
    unread = [message for message in run["loop"] if "never retrieved" in message]
    if not raised and not any("ValueError" in message for message in unread):
        c.skip(t("no task of registry_demo.py raised ValueError: exercise not attempted (the exercise: make work "
                 "raise ValueError after 0.1 s)"))
    for task in run["started"]:
        c.note(t("task started by start(): {value} running; ended {error}", error=task.get('error', task['ended']),
                 value=t('in') if task['registered'] else t('not in')))
    c.note(t("errors logged: {logged}", logged=run['logged'] or t('none')))
    c.note(t("tasks left in running at the end: {left}", left=run['left']))
    assert raised, t("the task that raised ValueError was not started with task_registry.start: nobody read its "
                     "exception (asyncio reported Task exception was never retrieved). Start it with start(work()) "
                     "so the done callback deals with it.")
    assert all(task["registered"] for task in run["started"]), not_registered()
    assert not any("Exception in callback" in message for message in run["loop"]), t(
        "the done callback raised (Exception in callback): log inside the callback, never re-raise.")
    said = [raised[0]["error"], raised[0].get("message") or "ValueError"]
    assert any("ValueError" in line or said[1] in line for line in run["logged"]), t(
        "the done callback did not log this {said}: observe must read task.exception() and log it with logging.error.",
        said=said[0])
    assert not unread, t("asyncio reported Task exception was never retrieved: a task's exception was never read.")
    assert run["left"] == 0, t("{left} task(s) were still in running at the end: the done callback must remove the "
                               "task first.", left=run['left'])
    assert run["outcome"] == "ok", t("registry_demo.py crashed: {outcome} (the callback logs the error; it must not "
                                     "bring the program down)", outcome=run['outcome'])


# ---------------------------------------------------------------- 03.4

def check_restart(c) -> None:
    import httpx2

    proc, port = SERVERS.running()
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        response = client.post("/exports", json={"product_ids": [3, 4]})
        assert response.status_code == 202, t("POST /exports should answer 202, got {response}",
                                              response=_short(response))
        job_id = response.json()["id"]
        before = client.get(f"/exports/{job_id}")
        assert before.status_code == 200 and before.json().get("id") == job_id, t(
            "GET /exports/{job_id} fails even before the crash: {before}", job_id=job_id, before=_short(before))
        c.note(t("before the crash: {job_id} is queryable, status={status}", job_id=job_id,
                 status=before.json().get('status')))

        # Extra evidence, not required: a background export caught mid-run (its work held), as in the drill.
        running_id = None
        since = len(proc.log_text())
        busy = client.post("/exports/background", json={"product_ids": [5, 6]})
        with contextlib.suppress(WaitTimeout, ValueError, KeyError, AttributeError, httpx2.HTTPError):
            candidate = busy.json()["id"]
            if held_export(SERVERS.gate, client, candidate, proc, since)[0] == "held" \
                    and client.get(f"/exports/{candidate}").json().get("status") == "running":
                running_id = candidate

    old_pid = proc.pid
    proc.kill()  # SIGKILL: no shutdown, no CancelledError, no finally — like a crash or OOM kill
    if running_id:
        c.note(t("SIGKILL sent to pid {pid} while {job_id} was running", pid=old_pid, job_id=running_id))
    else:
        c.note(t("SIGKILL sent to pid {pid}", pid=old_pid))

    try:
        new_proc, _ = SERVERS.start("uvicorn-restarted.log", port=port)
    except WaitTimeout as exc:
        # The wait's message already carries the log tail; its last lines name the cause.
        exc = "\n".join(str(exc).strip().splitlines()[-4:])
        raise AssertionError(t("the server does not come back on port {port} after the crash. A SIGKILLed process "
                               "runs no finally/atexit, so nothing it leaves behind (lock or pid files) may block a "
                               "restart.\n{exc}", port=port, exc=exc)) from None
    assert new_proc.pid != old_pid, t("the pid is still {old_pid} after the restart", old_pid=old_pid)
    c.note(t("restarted: new process pid {pid} on the same port {port}", pid=new_proc.pid, port=port))

    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        for old_id in filter(None, (job_id, running_id)):
            after = client.get(f"/exports/{old_id}")
            c.note(f"GET /exports/{old_id} → {after.status_code}")
            assert after.status_code == 404, t("the old job {old_id} still answers {after} after the restart. This "
                                               "lesson keeps jobs in process memory only, so a crash must lose them "
                                               "— that is the boundary the drill shows. Do not bolt file persistence "
                                               "on here; state that survives restarts is lesson 11's job.",
                                               old_id=old_id, after=_short(after))
        # The 404 must come from a working server that lost the job, not from a broken one.
        fresh = client.post("/exports", json={"product_ids": [7]})
        assert fresh.status_code == 202, t("the restarted server cannot accept a new job: {fresh}",
                                           fresh=_short(fresh))
        again = client.get(f"/exports/{fresh.json()['id']}")
        assert again.status_code == 200, t("the restarted server cannot find the job it just accepted: {again}",
                                           again=_short(again))
    c.note(t("the new process accepts and finds new jobs but knows nothing of the old ones: in-memory jobs die with "
             "the process and nothing recovers them. Exports that must survive a restart need their state and "
             "execution outside this process (lesson 11)."))
    new_proc.stop()


if __name__ == "__main__":
    run(checks(), teardown=SERVERS.stop_all)
