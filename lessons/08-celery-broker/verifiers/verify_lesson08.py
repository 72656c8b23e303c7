"""Verifier for lesson 08: a real broker, a real worker, a producer in another process.

08.1  an authenticated PING on 127.0.0.1:6384 answers PONG (ping_broker.py when present, else the
      kit's own PING with the same .env.tasks); without a password, and with a wrong one, Redis refuses
08.2  `celery -A celery_app:app inspect registered` against the running worker lists products.export
08.3  python produce_export.py: submitted id == job_id, {rows: 1, relative path}, state SUCCESS
08.4  a snapshot sent through export_products.apply_async (in a probe) lands as artifacts/<job_id>.json with
      equal JSON
08.5  the worker is stopped (SIGTERM by its PID); uvicorn serves api_submit's app (through lab08_api.py,
      which records every wait on a Celery result): the POST answers 202 while the worker is down, the
      handler never waited on a result, and the message waits in the broker's `exports` list (the check
      takes it back afterwards).  SKIP when the folder has no api_submit.py
08.6  prepare_broker.py, run twice in scratch folders: creates .env.tasks (0600) and broker-local/redis.conf
      (folder 0700) with one password, prints no secret, adds the ignore rules; then refuses and changes nothing
08.7  with the worker stopped a submitted id stays PENDING and get() times out; the waiting message carries
      no expiry that a short outage outlives; an equivalent worker is started and the same id reaches SUCCESS

The runner starts the worker declared in tasks.json; this verifier stops it for 08.5/08.7 and stops
every worker it starts itself.  Secrets are read from .env.tasks and never printed.  The learner's modules
never load here (the judge): export_products is sent with, waited on and asked about in a probe
(lab08_learner.py through shared/probe.py), which reports what happened; the checks decide.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urlsplit
from uuid import uuid4

from shared.celerylab import (
    LOG_DIR,
    WORK,
    DeclaredWorker,
    describe_url,
    env_file_values,
    log_lines,
    read_events,
    redact,
    redis_client,
    secrets_in,
    setting,
    start_worker,
)
from shared.i18n import t
from shared.probe import Probe
from shared.proc import WaitTimeout, run_python, start_uvicorn, wait_until
from shared.tap import Check, run

BROKER_PORT = 6384
QUEUE = "exports"
REPLY_SECONDS = 45  # bounds on answers that take milliseconds when all is well; a pass never waits them out
ANSWER_SECONDS = 20
OUTAGE = 20  # seconds: a worker restart (a deploy, a crash) easily lasts this long; queued work must outlive it
API_WAITS = LOG_DIR / "api-waits.jsonl"  # written by lab08_api.py
WORKER: DeclaredWorker | None = None  # the worker the runner declared (tasks.json): read in main, before the checks
NO_WORKER = ""  # why there is none: each check that needs the worker fails with this
RESULT_MARGIN = 15  # seconds a probe call may take beyond the wait on a result it was asked for
learner = Probe(verifiers=Path(__file__).resolve().parent)  # the learner's modules load there, never here


def checks() -> list[Check]:
    """The checks, in order: id -> what proves it.  All need the lesson's Redis on 6384 (.env.tasks);
    the ones given declared_worker() also the worker the runner started, which 08.5 and 08.7 stop."""
    return [
        Check("08.1", check_ping, "Redis; python ping_broker.py when present"),
        Check("08.2", lambda c: check_registered(c, declared_worker()), "worker; celery inspect registered"),
        Check("08.3", lambda c: check_producer(c, declared_worker()), "worker; python produce_export.py"),
        Check("08.4", check_artifact, "the running worker; probe: export_tasks"),
        Check("08.5", lambda c: check_api(c, declared_worker()), "worker (stopped); uvicorn lab08_api.py"),
        Check("08.6", check_prepare, "python prepare_broker.py in scratch folders"),
        Check("08.7", lambda c: check_restart(c, declared_worker()), "worker (stopped); an equivalent worker started"),
    ]


def declared_worker() -> DeclaredWorker:
    """The declared worker, asked for inside a check that needs it: without one that check fails, saying why."""
    assert WORKER, NO_WORKER
    return WORKER


def _out(done: subprocess.CompletedProcess, limit: int = 8) -> list[str]:
    return ["  " + redact(line) for line in done.stdout.splitlines()[-limit:]]


def _no_secret(text: str, where: str) -> None:
    for secret in secrets_in(env_file_values()):
        assert secret not in text, t(f"{where} 的输出里出现了凭据（密码或带密码的 URL）。只打印结果，不要打印 URL。",
                                     f"{where} printed a credential (a password or a URL holding one). "
                                     "Print outcomes, never the URL.")


def _snapshot(job: str) -> list[dict]:
    return [
        {"id": 7, "name": "教学样品 第七号", "description": "含中文与 \"引号\"", "is_active": True,
         "price_cents": 1999},
        {"id": 8, "name": f"lab-{job[:8]}", "description": "", "is_active": False, "price_cents": 0},
    ]


def _import_task() -> None:
    """export_tasks imported in the probe, defining export_products: an AssertionError that says why not."""
    learner.module("export_tasks", "export_products")


def _send(job_id: str, rows: list[dict]) -> str:
    """export_products.apply_async(args=[job_id, rows], task_id=job_id), in the probe: the message id."""
    return learner.call("lab08_learner:send", job_id, rows, job_id)


def _result(task_id: str, seconds: float):
    """AsyncResult(task_id).get(timeout=seconds), in the probe: the value, or what get raised (rebuilt)."""
    return learner.call("lab08_learner:result", task_id, seconds, timeout=seconds + RESULT_MARGIN)


def _state(task_id: str) -> str:
    return learner.call("lab08_learner:state", task_id)


def _waiting(job_id: str) -> tuple[bytes, dict] | None:
    """The message of job_id while it waits in the broker's exports list, as (raw, headers); LRANGE
    consumes nothing.  None when it is not there."""
    client = redis_client()
    try:
        raw = client.lrange(QUEUE, 0, -1)
    finally:
        client.close()
    for item in raw:
        try:
            headers = json.loads(item).get("headers") or {}
        except (ValueError, AttributeError):
            continue
        if headers.get("id") == job_id:
            return item, headers
    return None


# ---------------------------------------------------------------- 08.1

def check_ping(c) -> None:
    import redis

    assert (WORK / ".env.tasks").is_file(), t(
        "目录里没有 .env.tasks：运行 make services（或第 2 步的 prepare_broker.py）生成它",
        "there is no .env.tasks here: create it with make services (or step 2's prepare_broker.py)")
    url = setting("CELERY_BROKER_URL")
    assert url, t(".env.tasks 里没有 CELERY_BROKER_URL", ".env.tasks has no CELERY_BROKER_URL")
    parts = urlsplit(url)
    c.note(t(f"broker 地址：{describe_url(url)}（密码不显示）", f"broker: {describe_url(url)} (password not shown)"))
    assert parts.port == BROKER_PORT and parts.hostname in ("127.0.0.1", "localhost"), t(
        f"CELERY_BROKER_URL 指向 {describe_url(url)}，应为 127.0.0.1:{BROKER_PORT}（独立 broker，不是 6379/6380 或 "
        "broker:6379）",
        f"CELERY_BROKER_URL points at {describe_url(url)}; it should be 127.0.0.1:{BROKER_PORT} (the separate broker, "
        "not 6379/6380 or broker:6379)")
    assert parts.password, t("CELERY_BROKER_URL 没有密码：broker 必须要求认证",
                             "CELERY_BROKER_URL carries no password: the broker must require one")

    if (WORK / "ping_broker.py").is_file():
        done = run_python(["ping_broker.py"], cwd=WORK, timeout=20)
        c.note(t(f"python ping_broker.py → 退出码 {done.returncode}",
                 f"python ping_broker.py → exit code {done.returncode}"))
        _no_secret(done.stdout, "ping_broker.py")
        for line in _out(done):
            c.note(line)
        assert done.returncode == 0 and "PONG" in done.stdout.split(), t(
            "ping_broker.py 没有打印 PONG：用 Redis.from_url(CELERY_BROKER_URL) 连接（NOAUTH 表示没带密码）",
            "ping_broker.py did not print PONG: connect with Redis.from_url(CELERY_BROKER_URL) "
            "(NOAUTH means no password was sent)")
    else:
        client = redis_client(url)
        try:
            reply = client.ping()
        finally:
            client.close()
        c.note(t(f"没有 ping_broker.py，由检查器用同一个 .env.tasks 发送 PING：{'PONG' if reply else reply!r}",
                 "no ping_broker.py, so the kit sent the PING with the same .env.tasks: "
                 f"{'PONG' if reply else reply!r}"))
        assert reply is True, t("带认证的 PING 没有得到 PONG", "the authenticated PING did not answer PONG")

    refusals = []
    for label, password in ((t("没有密码", "no password"), None), (t("错误密码", "wrong password"), "not-the-password")):
        client = redis.Redis(host=parts.hostname, port=parts.port, password=password, retry=None,
                             socket_connect_timeout=10, socket_timeout=10)
        try:
            client.ping()
        except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError) as exc:
            refusals.append(f"{label}: {type(exc).__name__} ({str(exc)[:60]})")
            continue
        finally:
            client.close()
        raise AssertionError(t(f"broker 在{label}时也回答了 PING：requirepass 没有生效，同一主机上的任何人都能读写队列",
                               f"the broker answered a PING with {label}: requirepass is not in effect, "
                               "so anyone on this host can read and write the queue"))
    c.note(t("未认证连接被拒绝：", "unauthenticated connections refused: ") + "; ".join(refusals))


# ---------------------------------------------------------------- 08.2

def check_registered(c, worker: DeclaredWorker) -> None:
    assert worker.alive(), t(f"worker（pid {worker.pid}）已经退出，日志末尾：\n{worker.log_text()[-800:]}",
                             f"the worker (pid {worker.pid}) has exited; log tail:\n{worker.log_text()[-800:]}")
    command = ["-m", "celery", "-A", "celery_app:app", "inspect", "registered", "-d", worker.nodename, "-t", "5"]
    # A broadcast sent before the worker's control channel is subscribed is dropped, not queued, so one
    # "No nodes replied" proves nothing: ask again until the worker answers (bounded).  With -d the command
    # returns as soon as that worker has answered.
    asked_until = time.monotonic() + REPLY_SECONDS
    while True:
        done = run_python(command, cwd=WORK, timeout=60)
        if "No nodes replied" not in done.stdout or time.monotonic() >= asked_until:
            break
    c.note(t(f"celery -A celery_app:app inspect registered -d {worker.nodename} → 退出码 {done.returncode}",
             f"celery -A celery_app:app inspect registered -d {worker.nodename} → exit code {done.returncode}"))
    for line in _out(done, 5):
        c.note(line)
    names = [line.strip().lstrip("*").strip() for line in done.stdout.splitlines() if line.strip().startswith("*")]
    assert "products.export" in names, t(
        f"worker 注册的任务里没有 products.export（看到：{names or '无回应'}）。检查 celery_app 的 include、"
        "装饰器 name=\"products.export\"，改完重启 worker",
        f"products.export is not among the worker's registered tasks (seen: {names or 'no reply'}). Check include "
        "in celery_app, name=\"products.export\" on the decorator, and restart the worker after changes")
    started = log_lines(worker.log_text(), "products.export", limit=1)
    if started:
        c.note(t("worker 启动时的任务列表也有它：",
                 "the worker's start-up task list has it too: ") + started[0].strip())


# ---------------------------------------------------------------- 08.3

def check_producer(c, worker: DeclaredWorker) -> None:
    started = time.monotonic()
    try:
        done = run_python(["produce_export.py"], cwd=WORK, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(t("produce_export.py 30 秒内没有结束",
                               "produce_export.py did not finish within 30 s")) from None
    c.note(t(f"python produce_export.py → 退出码 {done.returncode}，{time.monotonic() - started:.1f} 秒",
             f"python produce_export.py → exit code {done.returncode} in {time.monotonic() - started:.1f} s"))
    for line in _out(done):
        c.note(line)
    assert done.returncode == 0, t("produce_export.py 失败了（见上方输出；TimeoutError 多半是 worker "
                                   "没收到或没注册任务）",
                                   "produce_export.py failed (see the output above; a TimeoutError usually means the "
                                   "worker never got the task or does not know its name)")
    lines = [line.strip() for line in done.stdout.splitlines()]
    submitted = next((line.split()[1] for line in lines if line.startswith("submitted ") and len(line.split()) > 1),
                     None)
    result = None
    for line in lines:
        if line.startswith("{"):
            try:
                result = ast.literal_eval(line)
            except (ValueError, SyntaxError):
                pass
    state = next((line.split()[1] for line in lines if line.startswith("state ") and len(line.split()) > 1), None)
    assert submitted and isinstance(result, dict), t("输出里缺少 submitted <id> 或结果字典",
                                                     "the output lacks the submitted <id> line or the result dict")
    assert result.get("job_id") == submitted, t(
        f"提交的消息 id {submitted} 与结果里的 job_id {result.get('job_id')} 不同：apply_async 要传 task_id=job_id",
        f"the submitted message id {submitted} differs from the result's job_id {result.get('job_id')}: "
        "pass task_id=job_id to apply_async")
    assert result.get("rows") == 1, t(f"rows 应为 1，实际 {result.get('rows')!r}",
                                      f"rows should be 1, got {result.get('rows')!r}")
    path = str(result.get("path", ""))
    assert path and not os.path.isabs(path), t(
        f"path 应是相对路径（artifacts/<job_id>.json），实际 {path!r}：不要 resolve() 成 worker 机器上的绝对路径",
        f"path should be relative (artifacts/<job_id>.json), got {path!r}: do not resolve() it into an absolute "
        "path on the worker's machine")
    assert Path(path) == Path("artifacts") / f"{submitted}.json", t(
        f"path 应为 artifacts/{submitted}.json，实际 {path}", f"path should be artifacts/{submitted}.json, got {path}")
    assert state == "SUCCESS", t(f"最后的状态应为 SUCCESS，实际 {state}",
                                 f"the final state should be SUCCESS, got {state}")
    assert (WORK / path).is_file(), t(f"worker 的目录里没有 {path}", f"{path} does not exist in the worker's folder")
    seen = log_lines(worker.log_text(), submitted, "succeeded", limit=1)
    c.note(t("worker 日志：",
             "worker log: ") + (seen[0].split("] ", 1)[-1] if seen else t("（未找到）", "(not found)")))


# ---------------------------------------------------------------- 08.4

def check_artifact(c) -> None:
    _import_task()
    job_id = str(uuid4())
    rows = _snapshot(job_id)
    _send(job_id, rows)
    try:
        value = _result(job_id, 20)
    except Exception as exc:  # noqa: BLE001
        why = redact(f"{type(exc).__name__}: {exc}")
        raise AssertionError(t(f"导出任务没有成功：{why}", f"the export did not succeed: {why}")) from None
    c.note(redact(t(f"提交 {len(rows)} 行快照，job_id {job_id}；结果 {value}",
                    f"sent a {len(rows)}-row snapshot as job {job_id}; result {value}")))
    target = WORK / "artifacts" / f"{job_id}.json"
    assert target.is_file(), t(f"没有找到 artifacts/{job_id}.json：文件名要用 job_id",
                               f"artifacts/{job_id}.json is missing: name the file by job_id")
    text = target.read_text(encoding="utf-8")
    try:
        written = json.loads(text)
    except ValueError:
        raise AssertionError(t(f"artifacts/{job_id}.json 不是合法 JSON：{text[:120]!r}",
                               f"artifacts/{job_id}.json is not valid JSON: {text[:120]!r}")) from None
    c.note(redact(t(f"文件内容（{len(text.encode())} 字节）：{text[:160]}",
                    f"file content ({len(text.encode())} bytes): {text[:160]}")))
    assert written == rows, t("文件里的 JSON 与提交的快照不相等：写入收到的 rows 本身，不要改名、包装或只写计数",
                              "the file's JSON differs from the submitted snapshot: write the received rows "
                              "themselves, "
                              "not renamed, wrapped or counted")


# ---------------------------------------------------------------- 08.5

def _post_in_thread(client, path: str, body: dict) -> dict:
    """Send the request in a thread, so the check can watch the facts meanwhile; the outcome lands in the dict."""
    outcome: dict = {}

    def send():
        try:
            outcome["response"] = client.post(path, json=body)
        except Exception as exc:  # noqa: BLE001 - a broken request is reported by the check
            outcome["error"] = exc
        outcome["done"] = True

    threading.Thread(target=send, daemon=True).start()
    return outcome


def check_api(c, worker: DeclaredWorker) -> None:
    import httpx2

    if not (WORK / "api_submit.py").is_file():
        c.skip(t("没有 api_submit.py（课程正文没有这一步；按本课指南添加后会检查）",
                 "no api_submit.py (the course text has no such step; add it from this lesson's guide to have it "
                 "checked)"))
    seconds = worker.stop()
    c.note(t(f"worker（pid {worker.pid}）已停止（SIGTERM，{seconds:.1f} 秒）",
             f"worker (pid {worker.pid}) stopped (SIGTERM, {seconds:.1f} s)"))
    API_WAITS.unlink(missing_ok=True)
    # lab08_api.py serves api_submit's own app and records every wait on a Celery result in API_WAITS.
    proc, port = start_uvicorn("lab08_api:app", cwd=WORK, log_path=LOG_DIR / "api_submit.log", timeout=REPLY_SECONDS)
    job_id = None
    try:
        body = {"rows": [{"id": 3, "name": "third", "description": "api path", "is_active": True, "price_cents": 300}]}
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=ANSWER_SECONDS + 10) as client:
            outcome = _post_in_thread(client, "/exports/celery", body)
            # Facts, not a stopwatch: either the answer comes, or the handler is seen waiting on a result.
            try:
                wait_until(lambda: outcome.get("done") or read_events(API_WAITS), ANSWER_SECONDS,
                           "the answer to POST /exports/celery")
            except WaitTimeout:
                pass
            waits = read_events(API_WAITS)
            for wait in waits[:2]:
                c.note(t(f"请求处理中调用了 {wait.get('call')}(timeout={wait.get('timeout')})",
                         f"the request handler called {wait.get('call')}(timeout={wait.get('timeout')})"))
            assert not waits, t(
                "worker 停止时，POST /exports/celery 在等待任务结果：请求处理里只调用 apply_async 并返回编号，"
                "不要 result.get()",
                "with the worker stopped, POST /exports/celery waits on the task's result: the handler should only "
                "call apply_async and return the id, never result.get()")
            assert outcome.get("done"), t(
                f"worker 停止时 POST /exports/celery {ANSWER_SECONDS} 秒都没有回答：请求处理在等待什么",
                f"with the worker stopped, POST /exports/celery gave no answer within {ANSWER_SECONDS} s: the handler "
                "is waiting for something")
            assert "response" in outcome, t(f"请求失败：{outcome.get('error')!r}",
                                            f"the request failed: {outcome.get('error')!r}")
            response = outcome["response"]
        shown = redact(response.text[:200])
        c.note(t(f"worker 停止时 POST /exports/celery → {response.status_code}，处理中没有等待任何任务结果",
                 f"worker stopped, POST /exports/celery → {response.status_code}, and the handler waited on no "
                 "task result"))
        assert response.status_code == 202, t(f"应返回 202，实际 {response.status_code} {shown}",
                                              f"expected 202, got {response.status_code} {shown}")
        job_id = response.json().get("id")
        assert job_id, t(f"202 响应里没有 id：{shown}", f"the 202 body has no id: {shown}")
        assert _waiting(job_id), t(
            f"broker 的 {QUEUE} 队列里没有 {job_id} 的消息：接口要用 apply_async 投递，不要在 API 进程里直接执行",
            f"there is no message for {job_id} in the broker's {QUEUE} list: the API must publish with apply_async, "
            "not run the export in its own process")
        c.note(t(f"消息 {job_id} 在 broker 的 {QUEUE} 队列里等待 worker", f"message {job_id} waits in the broker's "
                 f"{QUEUE} list for a worker"))
    finally:
        proc.stop()
        found = _waiting(job_id) if job_id else None
        if found:  # take our test message back, so no later worker on this slot runs it
            client = redis_client()
            try:
                client.lrem(QUEUE, 1, found[0])
            finally:
                client.close()


# ---------------------------------------------------------------- 08.6

def _tree(folder: Path) -> dict[str, tuple]:
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = (stat.S_IMODE(info.st_mode), info.st_mtime_ns,
                                                path.read_bytes() if path.is_file() else b"")
    return found


# Runs the learner's script with a password that needs URL encoding ('+' and '/'), as a real
# generator may produce: a URL built without quote() then no longer decodes to the password.
RUN_PREPARE = r'''
import runpy, secrets
_plain = secrets.token_urlsafe
secrets.token_urlsafe = lambda nbytes=None: _plain(nbytes) + "+/x"
runpy.run_path("prepare_broker.py", run_name="__main__")
'''


def _prepare(folder: Path) -> subprocess.CompletedProcess:
    if not (folder / "prepare_broker.py").exists():
        shutil.copy2(WORK / "prepare_broker.py", folder / "prepare_broker.py")
    return run_python(["-c", RUN_PREPARE], cwd=folder, timeout=20)


def check_prepare(c) -> None:
    assert (WORK / "prepare_broker.py").is_file(), t("没有 prepare_broker.py", "prepare_broker.py is missing")
    scratch = Path(tempfile.mkdtemp(prefix="lab08-prepare-"))
    try:
        first = scratch / "first"
        first.mkdir()
        (first / ".gitignore").write_text("node_modules/\n", encoding="utf-8")
        done = _prepare(first)
        env_path, folder, conf = first / ".env.tasks", first / "broker-local", first / "broker-local" / "redis.conf"
        c.note(t(f"空目录里第一次运行 → 退出码 {done.returncode}",
                 f"first run in an empty folder → exit code {done.returncode}"))
        values = env_file_values(env_path)
        for secret in secrets_in(values):
            assert secret not in done.stdout, t("prepare_broker.py 打印了密码或带密码的 URL",
                                                "prepare_broker.py printed the password or a URL holding it")
        for line in _out(done, 4):
            c.note(line)
        assert done.returncode == 0, t("第一次运行失败", "the first run failed")
        assert env_path.is_file() and conf.is_file(), t("没有同时生成 .env.tasks 和 broker-local/redis.conf",
                                                        "it did not create both .env.tasks and broker-local/redis.conf")
        env_mode, dir_mode = stat.S_IMODE(env_path.stat().st_mode), stat.S_IMODE(folder.stat().st_mode)
        c.note(t(f".env.tasks 权限 {env_mode:04o}，broker-local/ 权限 {dir_mode:04o}",
                 f".env.tasks mode {env_mode:04o}, broker-local/ mode {dir_mode:04o}"))
        assert env_mode == 0o600, t(f".env.tasks 权限应为 0600，实际 {env_mode:04o}",
                                    f".env.tasks should be 0600, got {env_mode:04o}")
        assert dir_mode == 0o700, t(f"broker-local/ 权限应为 0700，实际 {dir_mode:04o}",
                                    f"broker-local/ should be 0700, got {dir_mode:04o}")
        password = values.get("TASK_BROKER_PASSWORD", "")
        assert password, t(".env.tasks 里没有 TASK_BROKER_PASSWORD", ".env.tasks has no TASK_BROKER_PASSWORD")
        for key, db in (("CELERY_BROKER_URL", "/0"), ("CELERY_RESULT_BACKEND", "/1")):
            url = values.get(key, "")
            parts = urlsplit(url)
            assert parts.scheme == "redis" and parts.port == BROKER_PORT and parts.path == db, t(
                f"{key} 应为 "
                f"redis://:<密码>@127.0.0.1:{BROKER_PORT}{db}", f"{key} should be redis://:<password>@127.0.0.1:{BROKER_PORT}{db}")
            assert unquote(parts.password or "") == password, t(
                f"{key} 里的密码解码后不等于 TASK_BROKER_PASSWORD：用 quote(password, safe=\"\") 编码",
                f"the password in {key} does not decode to TASK_BROKER_PASSWORD: encode it with quote(password, "
                "safe=\"\")")
        conf_lines = conf.read_text(encoding="utf-8").splitlines()
        assert f"requirepass {password}" in conf_lines, t("redis.conf 的 requirepass 与 .env.tasks 的密码不一致",
                                                           "redis.conf's requirepass differs from the password in "
                                                           ".env.tasks")
        c.note(t("两个 URL 都指向 127.0.0.1:6384（DB 0 与 1），解码后的密码与 redis.conf 的 requirepass 一致",
                 "both URLs point at 127.0.0.1:6384 (DB 0 and 1) and decode to redis.conf's requirepass"))
        rules = (first / ".gitignore").read_text(encoding="utf-8").splitlines()
        assert ".env.tasks" in rules and "broker-local/" in rules and "node_modules/" in rules, t(
            f".gitignore 应保留原有规则并新增 .env.tasks 与 broker-local/，实际 {rules}",
            f".gitignore should keep its rules and gain .env.tasks and broker-local/, got {rules}")

        before = _tree(first)
        again = _prepare(first)
        c.note(t(f"第二次运行 → 退出码 {again.returncode}：{again.stdout.strip()[-120:]}",
                 f"second run → exit code {again.returncode}: {again.stdout.strip()[-120:]}"))
        assert again.returncode != 0, t("已有配置时第二次运行应拒绝并以非 0 退出",
                                        "the second run should refuse and exit non-zero")
        assert _tree(first) == before, t("第二次运行改动了已有文件（内容、权限或时间）",
                                         "the second run changed existing files")

        halves = ((t("只有 .env.tasks", "only .env.tasks"), lambda d: (d / ".env.tasks").write_text("KEEP=1\n")),
                  (t("只有 broker-local/", "only broker-local/"), lambda d: (d / "broker-local").mkdir()))
        for n, (label, make) in enumerate(halves):
            partial = scratch / f"half-{n}"
            partial.mkdir()
            shutil.copy2(WORK / "prepare_broker.py", partial / "prepare_broker.py")
            make(partial)
            snapshot = _tree(partial)
            result = _prepare(partial)
            assert result.returncode != 0 and _tree(partial) == snapshot, t(
                f"只有一半配置（{label}）时也必须拒绝且不写任何文件：先检查两个路径再写",
                f"with half a configuration ({label}) it must also refuse and write nothing: check both paths first")
        c.note(t("只有 .env.tasks 或只有 broker-local/ 时同样拒绝，什么也没写",
                 "it also refuses, writing nothing, when only .env.tasks or only broker-local/ exists"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------- 08.7

def _expires_in(headers: dict) -> float | None:
    """Seconds from now until the message expires (its `expires` header), or None when it never does."""
    value = headers.get("expires")
    if not value:
        return None
    when = datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - datetime.now(timezone.utc)).total_seconds()


def check_restart(c, worker: DeclaredWorker) -> None:
    from celery.exceptions import TimeoutError as CeleryTimeout

    _import_task()
    if worker.alive():
        seconds = worker.stop()
        c.note(t(f"worker（pid {worker.pid}）已停止（{seconds:.1f} 秒）",
                 f"worker (pid {worker.pid}) stopped ({seconds:.1f} s)"))
    job_id = str(uuid4())
    rows = _snapshot(job_id)
    _send(job_id, rows)
    try:
        _result(job_id, 1.5)
        raise AssertionError(t("没有 worker 时 get() 竟然拿到了结果：还有别的 worker 在消费 exports 吗？",
                               "get() returned a result with no worker running: is another worker consuming exports?"))
    except CeleryTimeout:
        pass
    pending = _state(job_id)
    found = _waiting(job_id)
    assert found, t(f"消息 {job_id} 不在 broker 的 {QUEUE} 队列里", f"message {job_id} is not in the broker's {QUEUE} list")
    c.note(t(f"worker 停止时提交 {job_id}：get(timeout=1.5) 超时，状态 {pending}，消息在 {QUEUE} 队列等待",
             f"submitted {job_id} with no worker: get(timeout=1.5) timed out, state {pending}, the message waits in "
             f"{QUEUE}"))
    # Whether a message outlives the outage is a fact it carries (its expiry), not a race with the restart.
    left = _expires_in(found[1])
    assert left is None or left > OUTAGE, t(
        f"等待中的消息 {left:.1f} 秒后过期（expires={found[1].get('expires')}）：worker 停机比这更久（重启、发布）"
        "时，任务会被丢弃为 REVOKED。排队的工作要能等到 worker 回来：去掉这么短的 expires",
        f"the waiting message expires in {left:.1f} s (expires={found[1].get('expires')}): when the worker is down "
        "longer than that (a restart, a deploy) the work is dropped as REVOKED. Queued work must wait for the "
        "worker: drop such a short expires")

    proc = start_worker(worker.argv, "worker-restarted.log", timeout=REPLY_SECONDS)
    c.note(t(f"按同一命令启动 worker：pid {proc.pid}", f"started a worker with the same command: pid {proc.pid}"))
    try:
        try:
            wait_until(lambda: _state(job_id) in ("SUCCESS", "FAILURE", "REVOKED"), REPLY_SECONDS,
                       f"{job_id} to finish", interval=0.1)
        except WaitTimeout:
            pass
        final = _state(job_id)
        if final != "SUCCESS":
            for line in log_lines(proc.log_text(), job_id):
                c.note("  " + line)
        assert final == "SUCCESS", t(f"恢复 worker 后同一个 id 的状态是 {final}，应为 SUCCESS",
                                     f"after the worker came back the same id is {final}, not SUCCESS")
        target = WORK / "artifacts" / f"{job_id}.json"
        assert target.is_file(), t(f"没有 artifacts/{job_id}.json", f"artifacts/{job_id}.json is missing")
        value = redact(str(_result(job_id, 5)))
        c.note(t(f"同一个 id {job_id} → SUCCESS，{value}", f"same id {job_id} → SUCCESS, {value}"))
    finally:
        proc.stop(grace=10)


if __name__ == "__main__":
    try:
        WORKER = DeclaredWorker()
    except AssertionError as exc:
        NO_WORKER = str(exc)
    run(checks())
