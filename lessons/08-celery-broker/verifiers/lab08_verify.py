"""Verifier for lesson 08: a real broker, a real worker, a producer in another process.

08.1  an authenticated PING on 127.0.0.1:6384 answers PONG (ping_broker.py when present, else the
      kit's own PING with the same .env.tasks); without a password, and with a wrong one, Redis refuses
08.2  the running worker, asked `inspect registered` through the checker's own Celery client (what
      `celery -A celery_app:app inspect registered` shows), lists products.export
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
(shared.lesson_celery.LearnerTask), which reports what happened; the checks decide.
"""

from __future__ import annotations

import contextlib
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

from shared.lesson_celery import (DeclaredWorker, LearnerTask, declared_worker, kit_inspect, queued_messages,
                                  redis_client, start_worker, take_back)
from shared.logs import LOG_DIR
from shared.events import read_events
from shared.scripts import log_lines, printed_dicts, run_script
from shared.settings import WORK, describe_url, env_file_values, redact, secrets_in, setting
from shared.i18n import t
from shared.probe import Probe
from shared.proc import WaitTimeout, run_python, start_uvicorn, wait_until
from shared.tap import Because, Check, run

BROKER_PORT = 6384
QUEUE = "exports"
REPLY_SECONDS = 45  # bounds on answers that take milliseconds when all is well; a pass never waits them out
ANSWER_SECONDS = 20
OUTAGE = 20  # seconds: a worker restart (a deploy, a crash) easily lasts this long; queued work must outlive it
API_WAITS = LOG_DIR / "api-waits.jsonl"  # written by lab08_api.py
EXPORT = LearnerTask(Probe(verifiers=Path(__file__).resolve().parent), "export_tasks:export_products")


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


def _out(done: subprocess.CompletedProcess, limit: int = 8) -> list[str]:
    return ["  " + redact(line) for line in done.stdout.splitlines()[-limit:]]


def _no_secret(text: str, where: str) -> None:
    for secret in secrets_in(env_file_values()):
        assert secret not in text, t("{where} printed a credential (a password or a URL holding one). Print "
                                     "outcomes, never the URL.", where=where)


def _snapshot(job: str) -> list[dict]:
    return [
        {"id": 7, "name": "教学样品 第七号", "description": "含中文与 \"引号\"", "is_active": True,
         "price_cents": 1999},
        {"id": 8, "name": f"lab-{job[:8]}", "description": "", "is_active": False, "price_cents": 0},
    ]


def _waiting(job_id: str) -> tuple[bytes, dict] | None:
    """The message of job_id while it waits in the broker's exports list, as (raw, headers); None when it is not
    there."""
    return next(((raw, headers) for raw, headers in queued_messages(QUEUE) if headers.get("id") == job_id), None)


# ---------------------------------------------------------------- 08.1

def _broker_counts(client) -> dict:
    """How many AUTH (or HELLO with AUTH) and PING commands the broker has run: INFO commandstats."""
    stats = client.info("commandstats")
    calls = {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("auth", "hello", "ping")}
    return {"auth": calls["auth"] + calls["hello"], "ping": calls["ping"]}


def check_ping(c) -> None:
    import redis

    assert (WORK / ".env.tasks").is_file(), t("there is no .env.tasks here: create it with make services (or step "
                                              "2's prepare_broker.py)")
    url = setting("CELERY_BROKER_URL")
    assert url, t(".env.tasks has no CELERY_BROKER_URL")
    parts = urlsplit(url)
    c.note(t("broker: {describe_url} (password not shown)", describe_url=describe_url(url)))
    if not (parts.port == BROKER_PORT and parts.hostname in ("127.0.0.1", "localhost")):
        where = t("in the environment (it wins over .env.tasks)") if os.environ.get("CELERY_BROKER_URL") else \
            t("in .env.tasks")
        raise Because(t("CELERY_BROKER_URL {where} is {found}; it should be redis://:<password>@127.0.0.1:"
                        "{broker_port}/<db> (the separate broker, not 6379/6380 or broker:6379)", where=where,
                        found=f"{parts.scheme or '?'}://…@{describe_url(url)}", broker_port=BROKER_PORT),
                      t("Use the URL make services (or prepare_broker.py) wrote into .env.tasks: scheme redis, host "
                        "127.0.0.1, port {broker_port}, the password after a colon. If the file is right, an "
                        "exported CELERY_BROKER_URL in your shell overrides it: unset it.", broker_port=BROKER_PORT))
    assert parts.password, t("CELERY_BROKER_URL carries no password: the broker must require one")

    if (WORK / "ping_broker.py").is_file():
        # The broker's own counters, read by the checker on one connection before and after the script: a
        # printed PONG is believed only beside an authenticated PING the broker itself counted.
        watch = redis_client(url)
        try:
            before = _broker_counts(watch)
            done = run_python(["ping_broker.py"], cwd=WORK, timeout=20)
            after = _broker_counts(watch)
        finally:
            watch.close()
        c.note(t("python ping_broker.py → exit code {returncode}", returncode=done.returncode))
        _no_secret(done.stdout, "ping_broker.py")
        for line in _out(done):
            c.note(line)
        assert done.returncode == 0 and "PONG" in done.stdout.split(), t(
            "ping_broker.py did not print PONG: connect with Redis.from_url(CELERY_BROKER_URL) (NOAUTH means no "
            "password was sent)")
        seen = {k: after[k] - before[k] for k in after}
        c.note(t("the broker counted while it ran: {auth} authentication(s), {ping} PING(s)", **seen))
        assert seen["auth"] > 0 and seen["ping"] > 0, t(
            "ping_broker.py printed PONG, but the broker counted {auth} authentication(s) and {ping} PING(s) while "
            "it ran: print what the broker answered, from Redis.from_url(CELERY_BROKER_URL).ping()", **seen)
    else:
        client = redis_client(url)
        try:
            reply = client.ping()
        finally:
            client.close()
        c.note(t("no ping_broker.py, so the kit sent the PING with the same .env.tasks: {reply!r}",
                 reply='PONG' if reply else reply))
        assert reply is True, t("the authenticated PING did not answer PONG")

    refusals = []
    for label, password in ((t("no password"), None), (t("wrong password"), "not-the-password")):
        client = redis.Redis(host=parts.hostname, port=parts.port, password=password, retry=None,
                             socket_connect_timeout=10, socket_timeout=10)
        try:
            client.ping()
        except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError) as exc:
            refusals.append(f"{label}: {type(exc).__name__} ({str(exc)[:60]})")
            continue
        finally:
            client.close()
        raise AssertionError(t("the broker answered a PING with {label}: requirepass is not in effect, so anyone on "
                               "this host can read and write the queue", label=label))
    c.note(t("unauthenticated connections refused: ") + "; ".join(refusals))


# ---------------------------------------------------------------- 08.2

def check_registered(c, worker: DeclaredWorker) -> None:
    worker.running(tail=800)
    # What `celery -A celery_app:app inspect registered` shows, asked through the kit's own Celery client:
    # the worker's own answer over the broker, not the output of a process that imported celery_app.
    answer = kit_inspect(worker.nodename, "registered", REPLY_SECONDS)
    replied = answer is not None
    names = [str(name).split(" ")[0] for name in answer or []]
    c.note(t("inspect registered, asked of {nodename} by the checker's own client → {names}",
             nodename=worker.nodename, names=", ".join(names) if replied else t("no reply")))
    if "products.export" not in names and replied and not names:
        raise Because(t("the worker replied, but with an empty task list (- empty -): it never imported export_tasks, "
                        "so products.export is not registered"),
                      t("A worker knows only the modules celery_app makes it import: give Celery(...) in "
                        "celery_app.py include=[\"export_tasks\"], then restart the worker."))
    if "products.export" not in names and names:
        raise Because(t("products.export is not among the worker's registered tasks; it replied with {names}: the "
                        "task is registered under another name", names=", ".join(names)),
                      t("Name the task in its decorator, @app.task(name=\"products.export\"): without name= Celery "
                        "names it after its module and function (export_tasks.export_products), which is not the "
                        "contract's name. Restart the worker after the change."))
    assert "products.export" in names, t("products.export is not among the worker's registered tasks (seen: "
                                         "{names}). Check include in celery_app, name=\"products.export\" on the "
                                         "decorator, and restart the worker after changes",
                                         names=names or t('no reply'))
    started = log_lines(worker.log_text(), "products.export", limit=1)
    if started:
        c.note(t("the worker's start-up task list has it too: ") + started[0].strip())


# ---------------------------------------------------------------- 08.3

def check_producer(c, worker: DeclaredWorker) -> None:
    artifacts = WORK / "artifacts"
    before = {p.name for p in artifacts.glob("*.json")} if artifacts.is_dir() else set()
    started = time.monotonic()
    done = run_script(["produce_export.py"], 30, late=t("produce_export.py did not finish within 30 s"))
    c.note(t("python produce_export.py → exit code {returncode} in {monotonic:.1f} s", returncode=done.code,
             monotonic=time.monotonic() - started))
    done.tail(c, 8, width=None)
    assert done.code == 0, t("produce_export.py failed (see the output above; a TimeoutError usually means the "
                             "worker never got the task or does not know its name)")
    lines = [line.strip() for line in done.lines]
    submitted = next((line.split()[1] for line in lines if line.startswith("submitted ") and len(line.split()) > 1),
                     None)
    dicts = printed_dicts(lines)
    result = dicts[-1] if dicts else None
    state = next((line.split()[1] for line in lines if line.startswith("state ") and len(line.split()) > 1), None)
    assert submitted and isinstance(result, dict), t("the output lacks the submitted <id> line or the result dict")
    assert result.get("job_id") == submitted, t("the submitted message id {submitted} differs from the result's "
                                                "job_id {job_id}: pass task_id=job_id to apply_async",
                                                submitted=submitted, job_id=result.get('job_id'))
    assert result.get("rows") == 1, t("rows should be 1, got {rows!r}", rows=result.get('rows'))
    path = str(result.get("path", ""))
    assert path and not os.path.isabs(path), t("path should be relative (artifacts/<job_id>.json), got {path!r}: do "
                                               "not resolve() it into an absolute path on the worker's machine",
                                               path=path)
    assert Path(path) == Path("artifacts") / f"{submitted}.json", t(
        "path should be artifacts/{submitted}.json, got {path}", submitted=submitted, path=path)
    assert state == "SUCCESS", t("the final state should be SUCCESS, got {state}", state=state)
    assert (WORK / path).is_file(), t("{path} does not exist in the worker's folder", path=path)
    # What the script printed, matched against what the checker reads itself: a file this run made, and the
    # result backend's own record of that task.
    assert Path(path).name not in before, t("{path} was there before produce_export.py ran: the printed id is not "
                                            "the message this run sent", path=path)
    record = redis_client(setting("CELERY_RESULT_BACKEND")).get(f"celery-task-meta-{submitted}")
    status = json.loads(record).get("status") if record else None
    assert status == "SUCCESS", t("the result backend holds {status} for {submitted}, not SUCCESS: the printed id "
                                  "is not a task the worker finished", status=status or t("nothing"),
                                  submitted=submitted)
    seen = log_lines(worker.log_text(), submitted, "succeeded", limit=1)
    c.note(t("worker log: ") + (seen[0].split("] ", 1)[-1] if seen else t("(not found)")))


# ---------------------------------------------------------------- 08.4

def check_artifact(c) -> None:
    EXPORT.load()
    job_id = str(uuid4())
    rows = _snapshot(job_id)
    EXPORT.send([job_id, rows], job_id)
    value = EXPORT.value(job_id, 20, lambda why: t("the export did not succeed: {why}", why=why))
    c.note(redact(t("sent a {n_rows}-row snapshot as job {job_id}; result {value}", n_rows=len(rows), job_id=job_id,
                    value=value)))
    target = WORK / "artifacts" / f"{job_id}.json"
    assert target.is_file(), t("artifacts/{job_id}.json is missing: name the file by job_id", job_id=job_id)
    text = target.read_text(encoding="utf-8")
    try:
        written = json.loads(text)
    except ValueError:
        raise AssertionError(t("artifacts/{job_id}.json is not valid JSON: {text!r}", job_id=job_id,
                               text=text[:120])) from None
    c.note(redact(t("file content ({n_encode} bytes): {text}", n_encode=len(text.encode()), text=text[:160])))
    assert written == rows, t("the file's JSON differs from the submitted snapshot: write the received rows "
                              "themselves, not renamed, wrapped or counted")


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
        c.skip(t("no api_submit.py (the course text has no such step; add it from this lesson's guide to have it "
                 "checked)"))
    seconds = worker.stop()
    c.note(t("worker (pid {pid}) stopped (SIGTERM, {seconds:.1f} s)", pid=worker.pid, seconds=seconds))
    API_WAITS.unlink(missing_ok=True)
    # lab08_api.py serves api_submit's own app and records every wait on a Celery result in API_WAITS.
    proc, port = start_uvicorn("lab08_api:app", cwd=WORK, log_path=LOG_DIR / "api_submit.log", timeout=REPLY_SECONDS)
    job_id = None
    try:
        body = {"rows": [{"id": 3, "name": "third", "description": "api path", "is_active": True, "price_cents": 300}]}
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=ANSWER_SECONDS + 10) as client:
            outcome = _post_in_thread(client, "/exports/celery", body)
            # Facts, not a stopwatch: either the answer comes, or the handler is seen waiting on a result.
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: outcome.get("done") or read_events(API_WAITS), ANSWER_SECONDS,
                           "the answer to POST /exports/celery")
            waits = read_events(API_WAITS)
            for wait in waits[:2]:
                c.note(t("the request handler called {call}(timeout={timeout})", call=wait.get('call'),
                         timeout=wait.get('timeout')))
            assert not waits, t("with the worker stopped, POST /exports/celery waits on the task's result: the "
                                "handler should only call apply_async and return the id, never result.get()")
            assert outcome.get("done"), t("with the worker stopped, POST /exports/celery gave no answer within "
                                          "{answer_seconds} s: the handler is waiting for something",
                                          answer_seconds=ANSWER_SECONDS)
            assert "response" in outcome, t("the request failed: {error!r}", error=outcome.get('error'))
            response = outcome["response"]
        shown = redact(response.text[:200])
        c.note(t("worker stopped, POST /exports/celery → {status_code}, and the handler waited on no task result",
                 status_code=response.status_code))
        assert response.status_code == 202, t("expected 202, got {status_code} {shown}", shown=shown,
                                              status_code=response.status_code)
        job_id = response.json().get("id")
        assert job_id, t("the 202 body has no id: {shown}", shown=shown)
        assert _waiting(job_id), t("there is no message for {job_id} in the broker's {queue} list: the API must "
                                   "publish with apply_async, not run the export in its own process", job_id=job_id,
                                   queue=QUEUE)
        c.note(t("message {job_id} waits in the broker's {queue} list for a worker", job_id=job_id, queue=QUEUE))
    finally:
        proc.stop()
        found = _waiting(job_id) if job_id else None
        if found:  # take our test message back, so no later worker on this slot runs it
            take_back(QUEUE, [found[0]])


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
    assert (WORK / "prepare_broker.py").is_file(), t("prepare_broker.py is missing")
    scratch = Path(tempfile.mkdtemp(prefix="lab08-prepare-"))
    try:
        first = scratch / "first"
        first.mkdir()
        (first / ".gitignore").write_text("node_modules/\n", encoding="utf-8")
        done = _prepare(first)
        env_path, folder, conf = first / ".env.tasks", first / "broker-local", first / "broker-local" / "redis.conf"
        c.note(t("first run in an empty folder → exit code {returncode}", returncode=done.returncode))
        values = env_file_values(env_path)
        for secret in secrets_in(values):
            assert secret not in done.stdout, t("prepare_broker.py printed the password or a URL holding it")
        for line in _out(done, 4):
            c.note(line)
        assert done.returncode == 0, t("the first run failed")
        assert env_path.is_file() and conf.is_file(), t("it did not create both .env.tasks and "
                                                        "broker-local/redis.conf")
        env_mode, dir_mode = stat.S_IMODE(env_path.stat().st_mode), stat.S_IMODE(folder.stat().st_mode)
        c.note(t(".env.tasks mode {env_mode:04o}, broker-local/ mode {dir_mode:04o}", env_mode=env_mode,
                 dir_mode=dir_mode))
        assert env_mode == 0o600, t(".env.tasks should be 0600, got {env_mode:04o}", env_mode=env_mode)
        assert dir_mode == 0o700, t("broker-local/ should be 0700, got {dir_mode:04o}", dir_mode=dir_mode)
        password = values.get("TASK_BROKER_PASSWORD", "")
        assert password, t(".env.tasks has no TASK_BROKER_PASSWORD")
        for key, db in (("CELERY_BROKER_URL", "/0"), ("CELERY_RESULT_BACKEND", "/1")):
            url = values.get(key, "")
            parts = urlsplit(url)
            if not (parts.scheme == "redis" and parts.port == BROKER_PORT and parts.path == db):
                raise Because(t("{key} in .env.tasks is {found}; it should be redis://:<password>@127.0.0.1:{broker_port}"
                                "{db}", key=key, found=f"{parts.scheme or '?'}://…@{describe_url(url)}" if url else
                                t("empty"), broker_port=BROKER_PORT, db=db),
                              t("prepare_broker.py writes both URLs from one template: scheme redis, host 127.0.0.1, "
                                "port {broker_port} (the separate broker, not 6379), the password after a colon, and "
                                "database /0 for the broker, /1 for results.", broker_port=BROKER_PORT))
            assert unquote(parts.password or "") == password, t(
                "the password in {key} does not decode to TASK_BROKER_PASSWORD: encode it with quote(password, "
                "safe=\"\")", key=key)
        conf_lines = conf.read_text(encoding="utf-8").splitlines()
        assert f"requirepass {password}" in conf_lines, t("redis.conf's requirepass differs from the password in "
                                                          ".env.tasks")
        c.note(t("both URLs point at 127.0.0.1:6384 (DB 0 and 1) and decode to redis.conf's requirepass"))
        rules = (first / ".gitignore").read_text(encoding="utf-8").splitlines()
        assert ".env.tasks" in rules and "broker-local/" in rules and "node_modules/" in rules, t(
            ".gitignore should keep its rules and gain .env.tasks and broker-local/, got {rules}", rules=rules)

        before = _tree(first)
        again = _prepare(first)
        c.note(t("second run → exit code {returncode}: {strip}", returncode=again.returncode,
                 strip=again.stdout.strip()[-120:]))
        assert again.returncode != 0, t("the second run should refuse and exit non-zero")
        assert _tree(first) == before, t("the second run changed existing files")

        halves = ((t("only .env.tasks"), lambda d: (d / ".env.tasks").write_text("KEEP=1\n")),
                  (t("only broker-local/"), lambda d: (d / "broker-local").mkdir()))
        for n, (label, make) in enumerate(halves):
            partial = scratch / f"half-{n}"
            partial.mkdir()
            shutil.copy2(WORK / "prepare_broker.py", partial / "prepare_broker.py")
            make(partial)
            snapshot = _tree(partial)
            result = _prepare(partial)
            assert result.returncode != 0 and _tree(partial) == snapshot, t(
                "with half a configuration ({label}) it must also refuse and write nothing: check both paths first",
                label=label)
        c.note(t("it also refuses, writing nothing, when only .env.tasks or only broker-local/ exists"))
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

    EXPORT.load()
    if worker.alive():
        seconds = worker.stop()
        c.note(t("worker (pid {pid}) stopped ({seconds:.1f} s)", pid=worker.pid, seconds=seconds))
    job_id = str(uuid4())
    rows = _snapshot(job_id)
    EXPORT.send([job_id, rows], job_id)
    try:
        EXPORT.result(job_id, 1.5)
        raise AssertionError(t("get() returned a result with no worker running: is another worker consuming exports?"))
    except CeleryTimeout:
        pass
    pending = EXPORT.state(job_id)
    found = _waiting(job_id)
    assert found, t("message {job_id} is not in the broker's {queue} list", job_id=job_id, queue=QUEUE)
    c.note(t("submitted {job_id} with no worker: get(timeout=1.5) timed out, state {pending}, the message waits in "
             "{queue}", job_id=job_id, pending=pending, queue=QUEUE))
    # Whether a message outlives the outage is a fact it carries (its expiry), not a race with the restart.
    left = _expires_in(found[1])
    assert left is None or left > OUTAGE, t("the waiting message expires in {left:.1f} s (expires={expires}): when "
                                            "the worker is down longer than that (a restart, a deploy) the work is "
                                            "dropped as REVOKED. Queued work must wait for the worker: drop such a "
                                            "short expires", left=left, expires=found[1].get('expires'))

    proc = start_worker(worker.argv, "worker-restarted.log", timeout=REPLY_SECONDS)
    c.note(t("started a worker with the same command: pid {pid}", pid=proc.pid))
    try:
        final = EXPORT.settled(job_id, REPLY_SECONDS)
        if final != "SUCCESS":
            for line in log_lines(proc.log_text(), job_id):
                c.note("  " + line)
        assert final == "SUCCESS", t("after the worker came back the same id is {final}, not SUCCESS", final=final)
        target = WORK / "artifacts" / f"{job_id}.json"
        assert target.is_file(), t("artifacts/{job_id}.json is missing", job_id=job_id)
        value = redact(str(EXPORT.result(job_id, 5)))
        c.note(t("same id {job_id} → SUCCESS, {value}", job_id=job_id, value=value))
    finally:
        proc.stop(grace=10)


if __name__ == "__main__":
    run(checks())
