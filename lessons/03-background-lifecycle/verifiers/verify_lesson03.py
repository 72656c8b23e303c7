"""Verifier for lesson 03: who owns background work, and what a crash takes with it.

03.1  a real uvicorn runs the learner's api_background app; POST /exports/background answers 202,
      the job reads running while its work is held, and succeeded with result.rows == 2 once released
03.2  python registry_demo.py prints cleanup before remaining 0 and leaves no task behind
03.3  task_registry.start with a failing coroutine: the done callback logs the ValueError,
      `running` empties, and asyncio never says "exception was never retrieved"
03.4  restart drill: a job is queryable, the server gets SIGKILL, a new process starts on
      the same port, and the old id answers 404 -- the loss boundary of in-memory jobs

uvicorn runs `lab03_app:app`: the learner's app, whose export's `asyncio.sleep` (its stand-in for
work) waits for this verifier's word when it runs after the response (shared.handshake files), and
notes when it runs before the response instead.  So "running" is seen while the work is provably
under way, and work done inside the request is a recorded fact -- no poll has to land in a time
window.  The uvicorn started for 03.1 is reused by 03.4 when both run.  Server logs and handshake
files go to .lab-logs/03/ in the working directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from shared import handshake
from shared.i18n import t
from shared.proc import Process, WaitTimeout, run_python, start_uvicorn, wait_until

WORK = Path.cwd()
LOGS = WORK / ".lab-logs" / "03"
APP = "lab03_app:app"  # the learner's api_background:app, its export's wait held (see above)
TERMINAL = {"succeeded", "failed", "cancelled"}
BOUND = 30.0  # backstop for waits that facts end in well under a second


def _log_path(name: str) -> Path:
    path = LOGS / name
    path.unlink(missing_ok=True)  # Process appends; start every run with an empty log
    return path


def _short(response) -> str:
    return f"{response.status_code} {response.text[:300]}"


def _log_tail(proc: Process | None, lines: int = 10) -> list[str]:
    """The end of a server's log without the access lines, where a background error shows up."""
    if proc is None:
        return []
    kept = [line for line in proc.log_text().splitlines() if '" 200' not in line and '" 202' not in line]
    return [t("服务器日志（略去访问记录）末尾：", "server log tail (access lines left out):"), *kept[-lines:]] if kept else []


class Servers:
    """The uvicorn processes this verifier started; every one is stopped by its PID at the end.
    Each gets its own handshake folder (`gate`), since each counts its held sleeps from 1."""

    def __init__(self):
        self.started: list[Process] = []
        self.gates: list[Path] = []
        self.current: Process | None = None
        self.port: int | None = None
        self.gate: Path | None = None

    def start(self, log_name: str, port: int | None = None) -> tuple[Process, int]:
        gate = LOGS / f"gate-{Path(log_name).stem}"
        shutil.rmtree(gate, ignore_errors=True)
        gate.mkdir(parents=True)
        os.environ["LAB03_GATE"] = str(gate)  # the server inherits it
        proc, port = start_uvicorn(APP, cwd=WORK, log_path=_log_path(log_name), port=port, timeout=BOUND)
        self.started.append(proc)
        self.gates.append(gate)
        self.current, self.port, self.gate = proc, port, gate
        return proc, port

    def running(self, log_name: str) -> tuple[Process, int]:
        """The server from an earlier check if it is still alive, else a fresh one."""
        if self.current is not None and self.current.alive():
            return self.current, self.port
        return self.start(log_name)

    def stop_all(self) -> None:
        for gate in self.gates:
            handshake.stop(gate)  # a held sleep goes on at once
        for proc in self.started:
            proc.stop()


def held_export(gate: Path, client, job_id: str) -> tuple[str, str | None]:
    """Wait until the export's work is under way, as the gate files and the job say:
    ("held", name): its sleep runs after the response and waits for our go;
    ("inside", None): its sleep ran before the response was sent (the work ran inside the request);
    ("ended", None): the job ended without a sleep through api_background's asyncio (nothing to hold)."""
    def seen():
        for path in sorted(gate.glob("seen-sleep-*")):
            if not path.name[len("seen-sleep-"):].isdigit():
                continue  # a file still being written (tmp name): whole files only
            record = json.loads(path.read_text(encoding="utf-8"))
            if not record.get("after_response"):
                return "inside", None
            name = path.name[len("seen-"):]
            if (gate / f"ready-{name}").exists():
                return "held", name
        reply = client.get(f"/exports/{job_id}")
        if reply.status_code == 200 and reply.json().get("status") in TERMINAL:
            return "ended", None
        return None
    return wait_until(seen, BOUND, "the export's work to start", interval=0.01)


# ---------------------------------------------------------------- 03.1

def check_background(c, servers: Servers) -> None:
    import httpx2

    proc, port = servers.start("uvicorn-first.log")
    c.note(t(f"uvicorn {APP} 已启动：pid {proc.pid}，端口 {port}",
             f"uvicorn {APP} is up: pid {proc.pid}, port {port}"))
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        started = time.monotonic()
        response = client.post("/exports/background", json={"product_ids": [1, 2]})
        post_seconds = time.monotonic() - started
        assert response.status_code == 202, t(
            f"POST /exports/background 应返回 202（已受理，尚未完成），实际 {_short(response)}",
            f"POST /exports/background must answer 202 (accepted, not done yet), got {_short(response)}")
        body = response.json()
        job_id = body.get("id") if isinstance(body, dict) else None
        assert job_id, t(f"202 响应体里没有 id：{response.text[:200]}",
                         f"the 202 body carries no id: {response.text[:200]}")
        location = response.headers.get("location")
        assert location == f"/exports/{job_id}", t(
            f"Location 应为 /exports/{job_id}，实际 {location!r}",
            f"Location should be /exports/{job_id}, got {location!r}")
        c.note(t(f"POST 用 {post_seconds * 1000:.0f} ms 返回 202，状态 {body.get('status')!r}，Location {location}",
                 f"POST answered 202 in {post_seconds * 1000:.0f} ms with status {body.get('status')!r}, "
                 f"Location {location}"))

        seen: list[str] = [body.get("status")]  # distinct statuses in the order we saw them
        last: dict = {}
        dropped: list[str] = []  # polls whose connection the server closed

        def poll() -> str | None:
            try:
                reply = client.get(location)
            except httpx2.TransportError as exc:
                # An exception escaping a background task makes uvicorn drop that connection;
                # poll again on a fresh one, unless the server itself is gone.
                assert proc.alive(), t("uvicorn 在轮询期间退出了", "uvicorn exited while we were polling")
                dropped.append(f"{type(exc).__name__}: {exc}")
                return None
            assert reply.status_code == 200, t(
                f"轮询 GET {location} 应返回 200，实际 {_short(reply)}",
                f"polling GET {location} should answer 200, got {_short(reply)}")
            last.clear()
            last.update(reply.json())
            status = last.get("status")
            if seen[-1] != status:
                seen.append(status)
            return status

        def server_log_notes() -> None:
            if dropped:
                c.note(t(f"{len(dropped)} 次轮询遇到连接被服务器关闭（{dropped[0]}）",
                         f"{len(dropped)} poll(s) found the connection closed by the server ({dropped[0]})"))
            for line in _log_tail(proc):
                c.note(line)

        try:
            where, name = held_export(servers.gate, client, job_id)
        except WaitTimeout:
            server_log_notes()
            raise AssertionError(t(
                f"导出一直没有开始（状态 {poll()!r}）：local_export 可能没有被安排，或在 transition 处抛错——"
                "响应已发出，错误只会出现在服务器日志里。",
                f"the export never got under way (status {poll()!r}): local_export was not scheduled, or it "
                "raised at a transition -- the response is already sent, so that error only shows in the server "
                "log.")) from None
        assert where != "inside", t(
            f"导出的等待在响应发出之前就开始了（POST 用了 {post_seconds:.2f} 秒）：工作在请求里运行，客户端要等它做完。"
            "用 background.add_task 登记，让它在响应之后运行。",
            f"the export's wait began before the response was sent (the POST took {post_seconds:.2f} s): the "
            "work ran inside the request and the client waited for it. Register it with background.add_task so "
            "it runs after the response.")
        if where == "held":
            during = poll()
            c.note(t(f"导出的工作在响应之后开始并被验证器挡住：此时 GET 看到 {during!r}",
                     f"the export's work began after the response and is held by the verifier: GET now reads "
                     f"{during!r}"))
            assert during == "running", t(
                f"工作进行中任务却是 {during!r}：local_export 开始工作时要先 transition 到 running。",
                f"the job reads {during!r} while its work is under way: local_export must move to running "
                "when it starts.")
            handshake.go(servers.gate, [name])
        else:
            c.note(t("导出没有经过 api_background 的 asyncio.sleep，无法挡住它：只能按轮询看到的状态判断",
                     "the export does not wait through api_background's asyncio.sleep, so it cannot be held: "
                     "judging by what the polls saw"))
        try:
            wait_until(lambda: poll() in TERMINAL, BOUND, "a terminal status", interval=0.02)
        except WaitTimeout:
            server_log_notes()
            raise AssertionError(t(
                f"放行后没有到达终态，看到的状态：{' → '.join(map(str, seen))}。local_export 可能在 transition 处抛错——"
                "响应已发出，错误只会出现在服务器日志里。",
                f"no terminal status after the release; statuses seen: {' → '.join(map(str, seen))}. local_export "
                "may have raised at a transition -- the response is already sent, so that error only shows in the "
                "server log.")) from None
        c.note(t(f"看到的状态：{' → '.join(map(str, seen))}", f"statuses seen: {' → '.join(map(str, seen))}"))

    assert "running" in seen, t(
        "从未观察到 running。工作要用 background.add_task 放到响应之后，并在开始时先 transition 到 running。",
        "running was never observed. The work must go through background.add_task so it runs after the "
        "response, and it must move to running when it starts.")
    if seen[-1] != "succeeded":
        for line in _log_tail(proc):
            c.note(line)
    assert seen[-1] == "succeeded", t(
        f"导出以 {seen[-1]} 结束（error={last.get('error')!r}），应为 succeeded",
        f"the export ended as {seen[-1]} (error={last.get('error')!r}); it should succeed")
    order = ["queued", "running", "succeeded"]
    assert all(s in order for s in seen) and seen == sorted(seen, key=order.index), t(
        f"状态顺序不对：{' → '.join(map(str, seen))}（应为 queued → running → succeeded）",
        f"statuses out of order: {' → '.join(map(str, seen))} (expected queued → running → succeeded)")
    result = last.get("result")
    rows = result.get("rows") if isinstance(result, dict) else None
    assert rows == 2, t(f"result 应为 {{'rows': 2}}（两个商品编号），实际 {result!r}",
                        f"result should be {{'rows': 2}} (two product ids), got {result!r}")
    c.note(t(f"最终记录：status=succeeded，result={result}", f"final record: status=succeeded, result={result}"))


# ---------------------------------------------------------------- 03.2

def check_registry_demo(c) -> None:
    started = time.monotonic()
    try:
        done = run_python(["registry_demo.py"], cwd=WORK, timeout=BOUND)
    except subprocess.TimeoutExpired:
        raise AssertionError(t(
            f"registry_demo.py {BOUND:g} 秒内没有结束（它本该约 3 秒结束）：等待窗口之后要 cancel 剩余任务，"
            "再 gather 等它们退出。",
            f"registry_demo.py did not end within {BOUND:g} s (it should take about 3 s): after the grace window "
            "cancel what is left, then gather it so it can leave.")) from None
    seconds = time.monotonic() - started
    out = done.stdout
    lines = [line.strip() for line in out.splitlines()]
    c.note(t(f"python registry_demo.py 用时 {seconds:.1f} 秒，退出码 {done.returncode}，输出：",
             f"python registry_demo.py took {seconds:.1f} s, exit code {done.returncode}, output:"))
    for line in out.splitlines()[-12:]:
        c.note("  " + line)

    assert done.returncode == 0, t(f"registry_demo.py 退出码应为 0，实际 {done.returncode}",
                                   f"registry_demo.py should exit 0, got {done.returncode}")
    assert "cleanup" in lines, t("没有打印 cleanup：work 的 finally 没有运行（任务没有被取消并等待到结束）。",
                                 "cleanup was never printed: work's finally did not run "
                                 "(the task was not cancelled and awaited to its end).")
    remaining = [i for i, line in enumerate(lines) if line.startswith("remaining")]
    assert remaining, t("没有打印 remaining N。", "no remaining N line was printed.")
    last = remaining[-1]
    assert lines[last] == "remaining 0", t(
        f"最后打印的是 {lines[last]!r}：仍有任务留在 running——done 回调要把它移出集合，"
        "而且要在 gather 等待之后才统计。",
        f"the last count was {lines[last]!r}: a task is still in running — the done callback must "
        "remove it, and the count must come after gather has awaited the cancelled tasks.")
    assert lines.index("cleanup") < last, t(
        "cleanup 出现在 remaining 之后：取消后没有 gather 等待，清理是 asyncio.run 收尾时才跑的。",
        "cleanup came after remaining: nothing awaited the cancelled task, so its cleanup only ran "
        "when asyncio.run tore the loop down.")
    for bad in ("Task was destroyed", "never retrieved"):
        assert bad not in out, t(f"输出里出现 {bad!r}：有任务没被等待或异常没被读取。",
                                 f"the output says {bad!r}: a task was not awaited or its exception was not read.")


# ---------------------------------------------------------------- 03.3

def check_failure_logged(c) -> None:
    try:
        done = run_python(["lab03_failing_task.py"], cwd=WORK, timeout=BOUND)
    except subprocess.TimeoutExpired:
        raise AssertionError(t(f"失败任务实验 {BOUND:g} 秒内没有结束（task_registry.start 有没有把协程交给事件循环？）",
                               f"the failing-task run did not end within {BOUND:g} s (does task_registry.start "
                               "hand the coroutine to the loop?)")) from None
    out = done.stdout
    result_lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not result_lines:
        for line in out.splitlines()[-8:]:
            c.note("  " + line)
        raise AssertionError(t(f"用 task_registry.start 运行失败任务时出错（退出码 {done.returncode}）",
                               f"running a failing task through task_registry.start broke "
                               f"(exit code {done.returncode})"))
    report = json.loads(result_lines[-1][len("RESULT "):])
    logged, loop_messages = report["logged"], report["loop"]
    c.note(t("start(一个 0.05 秒后抛 ValueError('drill-03') 的协程)",
             "start(a coroutine that raises ValueError('drill-03') after 0.05 s)"))
    c.note(t(f"done 回调记录的错误：{logged or '无'}", f"errors logged by the done callback: {logged or 'none'}"))
    c.note(t(f"之后 running 里还有 {report['left']} 个任务", f"tasks left in running afterwards: {report['left']}"))
    if loop_messages:
        c.note(t(f"asyncio 自己的报告：{loop_messages}", f"asyncio's own reports: {loop_messages}"))

    assert not any("Exception in callback" in m for m in loop_messages), t(
        "done 回调自己抛出了异常（Exception in callback）：在回调里只记录，不要再抛出或调用 task.result()。",
        "the done callback raised (Exception in callback): log inside the callback, never re-raise "
        "or call task.result() there.")
    assert any("ValueError" in m or "drill-03" in m for m in logged), t(
        "没有用 logging.error 记录这个 ValueError：observe 要在任务未取消时读取 task.exception() 并记录。",
        "the ValueError was not logged with logging.error: observe must read task.exception() "
        "when the task was not cancelled, and log it.")
    assert report["left"] == 0, t(
        f"任务失败后 running 里还剩 {report['left']} 个：observe 要先 discard，再处理异常。",
        f"{report['left']} task(s) stayed in running after the failure: observe must discard first, "
        "then deal with the exception.")
    assert "never retrieved" not in out, t(
        "asyncio 报告 Task exception was never retrieved：observe 没有读取任务的异常。",
        "asyncio reported Task exception was never retrieved: observe did not read the task's exception.")


# ---------------------------------------------------------------- 03.4

def check_restart(c, servers: Servers) -> None:
    import httpx2

    proc, port = servers.running("uvicorn-first.log")
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        response = client.post("/exports", json={"product_ids": [3, 4]})
        assert response.status_code == 202, t(f"POST /exports 应返回 202，实际 {_short(response)}",
                                              f"POST /exports should answer 202, got {_short(response)}")
        job_id = response.json()["id"]
        before = client.get(f"/exports/{job_id}")
        assert before.status_code == 200 and before.json().get("id") == job_id, t(
            f"崩溃前 GET /exports/{job_id} 就查不到：{_short(before)}",
            f"GET /exports/{job_id} fails even before the crash: {_short(before)}")
        c.note(t(f"崩溃前：{job_id} 可查询，status={before.json().get('status')}",
                 f"before the crash: {job_id} is queryable, status={before.json().get('status')}"))

        # Extra evidence, not required: a background export caught mid-run (its work held), as in the drill.
        running_id = None
        busy = client.post("/exports/background", json={"product_ids": [5, 6]})
        with contextlib.suppress(WaitTimeout, ValueError, KeyError, AttributeError, httpx2.HTTPError):
            candidate = busy.json()["id"]
            if held_export(servers.gate, client, candidate)[0] == "held" \
                    and client.get(f"/exports/{candidate}").json().get("status") == "running":
                running_id = candidate

    old_pid = proc.pid
    proc.kill()  # SIGKILL: no shutdown, no CancelledError, no finally — like a crash or OOM kill
    c.note(t(f"SIGKILL 发给 pid {old_pid}" + (f"，当时 {running_id} 正在 running" if running_id else ""),
             f"SIGKILL sent to pid {old_pid}" + (f" while {running_id} was running" if running_id else "")))

    try:
        new_proc, _ = servers.start("uvicorn-restarted.log", port=port)
    except WaitTimeout as exc:
        # The wait's message already carries the log tail; its last lines name the cause.
        exc = "\n".join(str(exc).strip().splitlines()[-4:])
        raise AssertionError(t(
            f"崩溃后服务在同一端口 {port} 起不来。被 SIGKILL 的进程不会运行 finally/atexit，"
            f"它留下的东西（锁文件、pid 文件）不能阻止重启。\n{exc}",
            f"the server does not come back on port {port} after the crash. A SIGKILLed process runs no "
            f"finally/atexit, so nothing it leaves behind (lock or pid files) may block a restart.\n{exc}")) from None
    assert new_proc.pid != old_pid, t(f"重启后 pid 仍是 {old_pid}", f"the pid is still {old_pid} after the restart")
    c.note(t(f"重启：新进程 pid {new_proc.pid}，同一端口 {port}",
             f"restarted: new process pid {new_proc.pid} on the same port {port}"))

    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=BOUND) as client:
        for old_id in filter(None, (job_id, running_id)):
            after = client.get(f"/exports/{old_id}")
            c.note(f"GET /exports/{old_id} → {after.status_code}")
            assert after.status_code == 404, t(
                f"旧任务 {old_id} 在重启后仍返回 {_short(after)}。本课的任务只存在进程内存里，"
                "崩溃就该丢失——这正是演练要展示的边界。不要在这里自制文件持久化；可靠的跨重启状态是第 11 课的内容。",
                f"the old job {old_id} still answers {_short(after)} after the restart. This lesson keeps jobs "
                "in process memory only, so a crash must lose them — that is the boundary the drill shows. "
                "Do not bolt file persistence on here; state that survives restarts is lesson 11's job.")
        # The 404 must come from a working server that lost the job, not from a broken one.
        fresh = client.post("/exports", json={"product_ids": [7]})
        assert fresh.status_code == 202, t(f"重启后的服务不能受理新任务：{_short(fresh)}",
                                           f"the restarted server cannot accept a new job: {_short(fresh)}")
        again = client.get(f"/exports/{fresh.json()['id']}")
        assert again.status_code == 200, t(f"重启后的服务查不到刚提交的任务：{_short(again)}",
                                           f"the restarted server cannot find the job it just accepted: "
                                           f"{_short(again)}")
    c.note(t("新进程能受理并查询新任务，却不认识旧任务：内存里的任务随进程一起消失，"
             "没有任何自动恢复。需要跨重启的导出要把状态和执行移出这个进程（第 11 课）。",
             "the new process accepts and finds new jobs but knows nothing of the old ones: in-memory jobs "
             "die with the process and nothing recovers them. Exports that must survive a restart need their "
             "state and execution outside this process (lesson 11)."))
    new_proc.stop()


def main(tap) -> None:
    servers = Servers()
    try:
        with tap.check("03.1") as c:
            c.skip_unless_selected()
            check_background(c, servers)
        with tap.check("03.2") as c:
            c.skip_unless_selected()
            check_registry_demo(c)
        with tap.check("03.3") as c:
            c.skip_unless_selected()
            check_failure_logged(c)
        with tap.check("03.4") as c:
            c.skip_unless_selected()
            check_restart(c, servers)
    finally:
        servers.stop_all()


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
