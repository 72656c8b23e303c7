"""Verifier for lesson 11: export job state in MySQL, leases with tokens, CAS to finish.

11.1  submit_snapshot([7, 8]); the products are then edited; the declared worker is stopped (by its
      PID) and a message is sent while it is down; the database server is restarted (pid and uptime
      show it); the row is still queued with the submit-time payload; a new worker (same argv) runs
      the job, and the published file holds the old snapshot.  python submit_db_export.py then runs
      against the new worker and its job reaches succeeded.
11.2  three jobs; for each, nine claimers (three lab11_claimer processes of three threads) call claim() at
      once, and any that reads the row without a lock is held until all have read (the worst interleaving
      for check-then-update): exactly one token, attempts == 1, and the row holds that token
11.3  a foreign token, a token past deadline_at, a token whose lease expired (before recovery) and the
      old token after recovery and a new claim: finish() is False each time and nothing is published;
      the current token publishes, and the old one still cannot overwrite it
11.4  a deliberately slow job (the worker's write is held by lab11_probe): during the write the row is
      already 'running' (the claim committed), information_schema.innodb_trx shows no transaction of
      the lesson's connections, and the row can be locked with NOWAIT
11.5  next_attempt_at one hour ahead: four concurrent claim() calls and three duplicate messages
      through the worker all get nothing; moved into the past (an UPDATE, not a wait), one claim works
11.6  an expired running job: claim() and a duplicate message get nothing; after the recovery
      transition the worker claims it with attempts == 2 and publishes its own file; the old token
      cannot finish; python verify_lease.py prints "lease ownership verified"
11.7  uvicorn api_db:app: a queued job nobody ran (Celery: PENDING) is 200, a row written by SQL alone
      is 200, a status changed by SQL shows at once, an unknown id is 404, and with the database
      unreachable the answer is 5xx, not 404 (SKIP when the folder has no api_db.py)
11.8  empty, 101 existing ids, 0, -3, "7", 7.0, True, a missing id: ValueError/TypeError with a
      message and no new row; exactly 100 existing ids are accepted
11.9  connect() with DATABASE_URL malformed in 13 ways (scheme, host, user, password, port, fragment,
      query, database name, stray %, non-UTF-8 %XX): ValueError every time, before any connection,
      and no form of the password in the message, traceback or output; the real URL connects
11.10 exercise: a state_store function named like renew_lease(job_id, token): +30 s for a live lease,
      capped at deadline_at (also when called twice at the cap), False for a foreign token, a
      cancelled job, an expired lease (which stays expired) and a queued job (SKIP when absent)

Time is never waited out: lease_until, deadline_at and next_attempt_at are moved with UPDATEs.
The kit reads the database through its own connections (never the learner's code) and never
prints credentials.  Restarting the database needs `"exclusive_services": true` (tasks.json).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import sys
import threading
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from uuid import uuid4

import pymysql

from shared import handshake
from shared.celerylab import (LOG_DIR, WORK, DeclaredWorker, import_learner, read_events, redact, setting, short,
                              start_worker)
from shared.i18n import t
from shared.labdb import db_settings, job_row, kit_db, sql, wait_status
from shared.proc import Process, WaitTimeout, free_port, run_python, wait_until

EVENTS = LOG_DIR / "lab11-events.jsonl"
HOLD_LIST = LOG_DIR / "lab11-hold.txt"
TERMINAL = ("succeeded", "failed", "cancelled")


# ---------------------------------------------------------------- the kit's own view of the database

def sql_count(query: str, args=()) -> int:
    with kit_db() as cur:
        return cur.execute(query, args)


def job_count() -> int:
    return sql("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"]


def payload_of(row: dict) -> list:
    value = row["payload"]
    return json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value


def products(ids: list[int]) -> list[dict]:
    marks = ",".join(["%s"] * len(ids))
    rows = sql(f"SELECT id, name, description, is_active, price_cents FROM products WHERE id IN ({marks}) "
               "ORDER BY id", ids)
    return [{**row, "is_active": bool(row["is_active"]), "price_cents": int(row["price_cents"])} for row in rows]


def same_rows(got: list, expected: list[dict]) -> bool:
    """The product rows, compared field by field (key order and extra fields do not matter)."""
    try:
        picked = sorted(({key: (bool(row[key]) if key == "is_active" else row[key]) for key in expected[0]}
                         for row in got), key=lambda row: row["id"])
    except (KeyError, TypeError, IndexError):
        return False
    return picked == expected


def mariadb_hint() -> str:
    """What to do when a course-typed connect() meets MariaDB (the guide's one allowed change)."""
    return t("服务器是 MariaDB，不认识 max_execution_time：把 connect() 里那一行改成 "
             "cur.execute(\"SET SESSION max_statement_time = 3\")（见本课指南）",
             "the server is MariaDB, which has no max_execution_time: change that line in connect() to "
             "cur.execute(\"SET SESSION max_statement_time = 3\") (see this lesson's guide)")


# ---------------------------------------------------------------- the learner's modules

def store():
    return import_learner("state_store", ("connect", "transaction", "decode_payload", "read_snapshot",
                                          "submit_snapshot", "claim", "finish"))


def export_task():
    return import_learner("export_tasks", ("export_products",)).export_products


def claimed_token(job) -> str | None:
    if job is None:
        return None
    assert isinstance(job, dict) and job.get("lease_token"), t(
        f"claim 应返回含 lease_token 的行或 None，实际 {job!r}"[:200],
        f"claim must return a row with lease_token or None, got {job!r}"[:200])
    return str(job["lease_token"])


# ---------------------------------------------------------------- workers and their events

class Workers:
    """The worker the runner declared; after 11.1 restarts it, an equivalent one we own."""

    def __init__(self):
        self._declared: DeclaredWorker | None = None
        self.own: Process | None = None

    @property
    def declared(self) -> DeclaredWorker:
        if self._declared is None:
            self._declared = DeclaredWorker()
        return self._declared

    def stop_declared(self) -> float:
        return self.declared.stop()

    def start_own(self) -> Process:
        self.own = start_worker(self.declared.argv, "worker-restarted.log")
        return self.own

    def ensure(self) -> None:
        if (self.own is not None and self.own.alive()) or self.declared.alive():
            return
        self.start_own()

    def stop_all(self) -> None:
        if self.own is not None:
            self.own.stop(grace=10)


def events() -> list[dict]:
    return read_events(EVENTS)


def wait_task_end(result, seconds: float = 20) -> dict:
    """The worker's record of this message's execution (probe event), once it has ended."""
    def ended():
        return next((e for e in events() if e.get("kind") == "end" and e.get("task_id") == result.id), None)
    try:
        return wait_until(ended, seconds, f"task {result.id} to end", interval=0.05)
    except WaitTimeout:
        raise AssertionError(t(f"worker 在 {seconds:g} 秒内没有执行完消息 {short(result.id)}（看 worker 日志）",
                               f"the worker did not finish message {short(result.id)} within {seconds:g}s "
                               "(see the worker log)")) from None


def published_file(row: dict) -> tuple[Path, list]:
    ref = row.get("result_ref")
    assert ref, t("任务已 succeeded，但 result_ref 为空", "the job succeeded but result_ref is empty")
    path = Path(ref) if Path(ref).is_absolute() else WORK / ref
    assert path.is_file(), t(f"result_ref 指向的文件不存在：{ref}", f"result_ref points to no file: {ref}")
    return path, json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- restarting the database server

def server_state() -> dict:
    with kit_db() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
        uptime = int(cur.fetchone()["Value"])
        cur.execute("SELECT VERSION() AS v")
        version = cur.fetchone()["v"]
    return {"uptime": uptime, "version": version}


def database_answers() -> bool:
    try:
        with kit_db() as cur:
            cur.execute("SELECT 1")
        return True
    except pymysql.MySQLError:
        return False


def restart_database() -> str:
    """Stop and start the lab's database server through shared.labctl; return what shows it happened."""
    from shared import labctl
    before, old_pid = server_state(), labctl.MYSQL.pid()
    try:
        how = labctl.stop_service("mysql")
        labctl.up(["mysql"])
    except labctl.ServiceError as exc:  # external mode: a server the learner runs is never stopped
        raise AssertionError(t(f"无法证明本项：{exc}", f"this item cannot be proved: {exc}")) from None
    wait_until(database_answers, 60, "the database to answer again", interval=0.2)
    after = server_state()
    new_pid = labctl.MYSQL.pid()
    assert after["uptime"] < before["uptime"] or (old_pid and new_pid and new_pid != old_pid), t(
        "数据库似乎没有真正重启", "the database server does not look restarted")
    return f"{how}, uptime {before['uptime']} s → {after['uptime']} s ({after['version']})"


# ---------------------------------------------------------------- 11.1

def run_submit_script(c) -> None:
    """python submit_db_export.py with the worker up: its job (found in its output) reaches succeeded."""
    done = run_python(["submit_db_export.py"], cwd=WORK, timeout=40)
    output = redact(done.stdout)
    found = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", output)
    if done.returncode != 0 or not found:
        for line in [line for line in output.splitlines() if line.strip()][-4:]:
            c.note("  " + line[:200])
    if done.returncode != 0 and "max_execution_time" in output and "1193" in output:
        raise AssertionError(mariadb_hint())
    assert done.returncode == 0, t("python submit_db_export.py 失败（见下方输出）",
                                   "python submit_db_export.py failed (see the output below)")
    assert found, t("submit_db_export.py 没有打印任务行（找不到 job id）",
                    "submit_db_export.py printed no job row (no job id found)")
    row = wait_status(found[0], TERMINAL, 20)
    assert row["status"] == "succeeded", t(f"submit_db_export.py 的任务结束于 {row['status']}",
                                           f"submit_db_export.py's job ended {row['status']}")
    c.note(t(f"python submit_db_export.py → 退出码 0，它的任务 {short(found[0])} 经 worker 变为 succeeded",
             f"python submit_db_export.py → exit code 0; its job {short(found[0])} reached succeeded via the worker"))


def check_durable(c, workers: Workers) -> None:
    state_store, export_products = store(), export_task()
    run_submit_script(c)
    ids = [7, 8]
    snapshot = products(ids)
    job_id = state_store.submit_snapshot(ids)
    row = job_row(job_id)
    assert row is not None, t("submit_snapshot 返回后表里没有这一行", "no row after submit_snapshot returned")
    assert same_rows(payload_of(row), snapshot), t(
        "payload 不是提交时的商品行（id、name、description、is_active、price_cents）",
        "payload is not the products as they were at submit (id, name, description, is_active, price_cents)")
    c.note(t(f"submit_snapshot({ids}) → {short(job_id)}，payload = 当时的商品 7、8（{snapshot[0]['name']}…）",
             f"submit_snapshot({ids}) → {short(job_id)}, payload = products 7 and 8 as they were "
             f"({snapshot[0]['name']} …)"))

    sql("UPDATE products SET name=CONCAT(name, ' (edited)'), price_cents=price_cents+1000, "
        "is_active=1-is_active, version=version+1 WHERE id IN (7, 8)")
    edited = products(ids)
    c.note(t(f"随后修改商品：{edited[0]['name']}，price_cents {snapshot[0]['price_cents']} → "
             f"{edited[0]['price_cents']}",
             f"then the products are edited: {edited[0]['name']}, price_cents {snapshot[0]['price_cents']} → "
             f"{edited[0]['price_cents']}"))

    seconds = workers.stop_declared()
    c.note(t(f"worker（pid {workers.declared.pid}）已停止（{seconds:.1f} 秒）；"
             "在它停着时发送 export_products.delay(job_id)",
             f"worker (pid {workers.declared.pid}) stopped ({seconds:.1f}s); export_products.delay(job_id) sent "
             "while it is down"))
    export_products.delay(job_id)

    c.note(t("重启数据库：", "database restarted: ") + restart_database())
    row = job_row(job_id)
    assert row is not None, t("数据库重启后任务行不见了：提交事务没有真正 commit？",
                              "the job row is gone after the database restart: did the submit really commit?")
    assert row["status"] == "queued" and row["attempts"] == 0, t(
        f"worker 停着时任务应仍为 queued/0，实际 {row['status']}/{row['attempts']}",
        f"with no worker the job should still be queued/0, got {row['status']}/{row['attempts']}")
    assert same_rows(payload_of(row), snapshot), t("数据库重启后 payload 变了",
                                                   "the payload changed across the restart")
    c.note(t("重启后：行仍在，queued，payload 仍是修改前的快照", "after it: the row is there, queued, payload still "
             "the pre-edit snapshot"))

    own = workers.start_own()
    row = wait_status(job_id, TERMINAL, 25)
    assert row["status"] == "succeeded", t(f"任务结束于 {row['status']}，应为 succeeded",
                                           f"the job ended {row['status']}, expected succeeded")
    path, written = published_file(row)
    assert same_rows(written, snapshot), t(
        "发布的文件不是提交时的快照：worker 不能在执行时重新查询 products",
        "the published file is not the submit-time snapshot: the worker must not re-read products")
    c.note(t(f"新 worker（pid {own.pid}，同样的命令）执行：succeeded，attempts={row['attempts']}，文件中是修改前的 "
             f"{written[0].get('name')}", f"a new worker (pid {own.pid}, same command) ran it: succeeded, attempts="
             f"{row['attempts']}, the file holds the pre-edit {written[0].get('name')}"))


# ---------------------------------------------------------------- 11.2

def check_single_claim(c) -> None:
    state_store = store()
    procs_n, threads_n = 3, 3
    names = [f"p{p}.{k}" for p in range(1, procs_n + 1) for k in range(1, threads_n + 1)]
    jobs = [state_store.submit_snapshot([n]) for n in (11, 12, 13)]
    folder = LOG_DIR / f"lab11-claim-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    procs = [Process([sys.executable, "lab11_claimer.py", str(folder), f"p{p}", str(threads_n)], cwd=WORK,
                     log_path=folder / f"p{p}.log") for p in range(1, procs_n + 1)]
    try:
        wait_until(lambda: all((folder / f"ready-{n}").exists() for n in names)
                   or any(not p.alive() for p in procs), 30, "the claimer processes to import state_store")
        dead = [p for p in procs if not p.alive()]
        assert not dead, t("claim 子进程启动失败：\n", "a claimer process failed to start:\n") + \
            redact(dead[0].log_tail(6))
        for k, job_id in enumerate(jobs, 1):
            handshake.go(folder, names, {"job": job_id}, round_no=k)
            # Released together; a claimer that read without a lock waits (transaction open) until every
            # claimer has read or finished, so none of them writes before all have seen 'queued'.
            wait_until(lambda k=k: all((folder / f"paused-{n}-{k}").exists() or (folder / f"res-{n}-{k}").exists()
                                       for n in names), 30, "every claimer to read the job or finish")
            paused = sum((folder / f"paused-{n}-{k}").exists() for n in names)
            handshake.go(folder, ["release"], round_no=k)
            outcomes = [handshake.wait_result(folder, n, 20, round_no=k) for n in names]
            errors = [o["error"] for o in outcomes if o.get("error")]
            winners = [o for o in outcomes if o.get("token")]
            row = job_row(job_id)
            how = (t(f"{paused} 个先做了不加锁的读取，等全部读完才放行", f"{paused} read without a lock and were held "
                     "until all had read") if paused else t("每个都在读取时加锁", "each one locked as it read"))
            c.note(t(f"第 {k} 轮（{short(job_id)}）：{procs_n} 个进程 × {threads_n} 个线程同时 claim"
                     f"（{how}）→ {len(winners)} 个 token，"
                     f"{len(outcomes) - len(winners) - len(errors)} 个 None，{len(errors)} 个错误；"
                     f"行：{row['status']}，attempts={row['attempts']}",
                     f"round {k} ({short(job_id)}): {procs_n} processes × {threads_n} threads claim at once "
                     f"({how}) → {len(winners)} "
                     f"token(s), {len(outcomes) - len(winners) - len(errors)} None, {len(errors)} error(s); "
                     f"row: {row['status']}, attempts={row['attempts']}"))
            assert not errors, t(f"claim 抛出异常：{redact(errors[0])}（行被锁住时应返回 None，而不是等待或报错）",
                                 f"claim raised {redact(errors[0])} (a locked row should give None, not a wait or "
                                 "an error)")
            assert len(winners) == 1, t(
                f"同一任务有 {len(winners)} 方拿到 token：先 FOR UPDATE SKIP LOCKED 锁行，"
                "UPDATE 要带 status='queued' 条件",
                f"{len(winners)} claimers got a token for one job: lock with FOR UPDATE SKIP LOCKED and keep "
                "status='queued' in the UPDATE")
            assert row["status"] == "running" and row["attempts"] == 1 and row["lease_token"] == winners[0]["token"], t(
                "行的 lease_token / attempts 与唯一的赢家不一致",
                "the row's lease_token / attempts do not match the one winner")
    finally:
        handshake.stop(folder)
        for proc in procs:
            proc.stop(grace=3)


# ---------------------------------------------------------------- 11.3

RECOVER_SQL = """UPDATE export_jobs SET status='queued', lease_token=NULL, lease_until=NULL,
                   next_attempt_at=NOW(6), updated_at=NOW(6)
                 WHERE id=%s AND status='running' AND lease_until<NOW(6)"""


def check_old_token(c) -> None:
    state_store = store()
    job_id = state_store.submit_snapshot([21])
    old = claimed_token(state_store.claim(job_id))
    assert old, t("新提交的任务第一次 claim 就拿不到 token", "the first claim of a fresh job got no token")

    forged = str(uuid4())
    assert state_store.finish(job_id, forged, "artifacts/forged.json") is False, t(
        "别人的 token 也能 finish：WHERE 里要比较 lease_token", "a foreign token finished the job: compare lease_token")
    c.note(t("租约有效时，陌生 token 的 finish → False", "while the lease is live, a foreign token's finish → False"))

    sql("UPDATE export_jobs SET deadline_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
    late = state_store.finish(job_id, old, "artifacts/after-deadline.json")
    sql("UPDATE export_jobs SET deadline_at=DATE_ADD(NOW(6), INTERVAL 10 MINUTE) WHERE id=%s", (job_id,))
    assert late is False, t("deadline_at 已过，当前 token 仍能 finish：WHERE 要带 deadline_at>NOW(6)",
                            "past deadline_at the token still finished: keep deadline_at>NOW(6) in the WHERE")
    c.note(t("deadline_at 移到过去（租约仍有效）→ False", "deadline_at moved into the past (lease still live) → False"))

    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
    expired = state_store.finish(job_id, old, "artifacts/expired.json")
    row = job_row(job_id)
    assert expired is False and row["result_ref"] is None and row["status"] == "running", t(
        "租约已过期（恢复前），旧 token 仍能 finish：WHERE 要带 lease_until>NOW(6)",
        "with its lease expired (before recovery) the old token still finished: keep lease_until>NOW(6) in the WHERE")
    c.note(t("租约移到过去，恢复前：旧 token → False，result_ref 仍为空",
             "lease moved into the past, before recovery: old token → False, result_ref still empty"))

    assert sql_count(RECOVER_SQL, (job_id,)) == 1, t("恢复转换没有作用到这一行",
                                                     "the recovery transition missed the row")
    new = claimed_token(state_store.claim(job_id))
    assert new and new != old, t("恢复后应能重新领取并得到新 token", "after recovery a new claim must get a new token")
    after = state_store.finish(job_id, old, "artifacts/stale.json")
    row = job_row(job_id)
    assert after is False and row["result_ref"] is None and row["lease_token"] == new, t(
        "恢复并重新领取后，旧 token 仍能 finish", "after recovery and a new claim the old token still finished")
    c.note(t("恢复 + 新的 claim 之后：旧 token → False，行上是新 token", "after recovery and a new claim: old token → "
             "False, the row holds the new token"))

    ref = f"artifacts/{job_id}.{new}.json"
    assert state_store.finish(job_id, new, ref) is True, t("当前 token 应能 finish", "the current token must finish")
    again = state_store.finish(job_id, old, "artifacts/overwrite.json")
    row = job_row(job_id)
    assert again is False and row["result_ref"] == ref and row["status"] == "succeeded", t(
        "新 token 发布后，旧 token 又改写了结果", "after the new token published, the old one overwrote the result")
    c.note(t("新 token 发布成功；之后旧 token 再 finish → False，result_ref 不变",
             "the new token publishes; the old token trying again afterwards → False, result_ref unchanged"))


# ---------------------------------------------------------------- 11.4

def other_transactions() -> list[dict]:
    """Open InnoDB transactions of the lesson's connections (same user and schema), ours excluded.

    information_schema.innodb_trx is a server-wide cache, refreshed only when nobody has read it for 0.1 s:
    one read may still show a transaction that committed a moment ago (the worker's claim).  So it is read
    until two reads 0.25 s apart name the same transactions; one that is really held stays in both."""
    previous: list | None = None

    def settled():
        nonlocal previous
        found = transactions_now()
        ids = sorted(str(row["trx_id"]) for row in found)
        agreed, previous = ids == previous, ids
        return (found,) if agreed else None
    return wait_until(settled, 10, "two reads of innodb_trx that agree", interval=0.25)[0]


def transactions_now() -> list[dict]:
    settings = db_settings()
    with kit_db() as cur:
        cur.execute("SELECT trx_id, trx_state, trx_started, trx_mysql_thread_id AS thread, trx_rows_locked, "
                    "trx_query FROM information_schema.innodb_trx WHERE trx_mysql_thread_id <> CONNECTION_ID()")
        trx = list(cur.fetchall())
        cur.execute("SHOW FULL PROCESSLIST")
        threads = {row["Id"]: row for row in cur.fetchall()}
    mine = []
    for row in trx:
        thread = threads.get(row["thread"], {})
        if thread.get("User") in (None, settings["user"]) and thread.get("db") in (None, settings["database"]):
            mine.append(row)
    return mine


def row_lockable(job_id: str) -> str | None:
    """None when we can lock the row at once; the server's error otherwise."""
    try:
        with kit_db(autocommit=False) as cur:
            cur.execute("SELECT id FROM export_jobs WHERE id=%s FOR UPDATE NOWAIT", (job_id,))
            cur.connection.rollback()
        return None
    except pymysql.MySQLError as exc:
        return f"{exc.args[0]}: {exc.args[1] if len(exc.args) > 1 else ''}"


def check_no_transaction(c, workers: Workers) -> None:
    state_store, export_products = store(), export_task()
    workers.ensure()
    job_id = state_store.submit_snapshot([31, 32, 33])
    with open(HOLD_LIST, "a", encoding="utf-8") as handle:
        handle.write(job_id + "\n")
    release = LOG_DIR / f"lab11-release-{job_id}"
    try:
        result = export_products.delay(job_id)
        try:
            hold = wait_until(lambda: next((e for e in events() if e.get("kind") == "hold" and e.get("job") == job_id),
                                           None), 20, "the worker to start writing the file")
        except WaitTimeout:
            raise AssertionError(t(
                "worker 20 秒内没有开始写文件（文件路径里要有 job_id，如 artifacts/<job_id>.<token>.json）",
                "the worker did not start writing within 20 s (the path must contain the job_id, e.g. "
                "artifacts/<job_id>.<token>.json)")) from None
        c.note(t(f"慢任务：worker pid {hold['pid']} 停在写 {Path(hold['path']).name} 之前",
                 f"slow job: worker pid {hold['pid']} held just before writing {Path(hold['path']).name}"))
        row = job_row(job_id)
        open_trx = other_transactions()
        lock_error = row_lockable(job_id)
        # The probe holds the write for 25 s at most: what was seen counts only if it still holds it now.
        ran_out = any(e.get("kind") == "release" and e.get("job") == job_id for e in events())
    finally:
        release.touch()
    assert not ran_out, t("探针的暂停（最多 25 秒）在检查器观察完之前就结束了：这次观察不算数，请在机器较空闲时重试",
                          "the probe's hold (25 s at most) ended before the checker had looked: this observation "
                          "does not count; run the check again on a less busy machine")
    c.note(t(f"写文件期间：行 {row['status']}，attempts={row['attempts']}，"
             f"lease_token {'已' if row['lease_token'] else '未'}提交",
             f"during the write: row {row['status']}, attempts={row['attempts']}, lease_token "
             f"{'committed' if row['lease_token'] else 'not visible'}"))
    c.note(t(f"information_schema.innodb_trx：本课连接的事务 {len(open_trx)} 个",
             f"information_schema.innodb_trx: {len(open_trx)} transaction(s) of the lesson's connections"))
    for trx in open_trx[:3]:
        c.note(f"  trx {trx['trx_id']} thread {trx['thread']} {trx['trx_state']} since {trx['trx_started']} "
               f"rows_locked={trx['trx_rows_locked']}")
    c.note(t("SELECT … FOR UPDATE NOWAIT 锁这一行：", "SELECT … FOR UPDATE NOWAIT on the row: ")
           + (t("立即成功", "granted at once") if lock_error is None else lock_error))
    assert row["status"] == "running" and row["lease_token"], t(
        "写文件时行还不是 running：claim 的事务应在写文件前提交", "the row is not running during the write: the claim "
        "must commit before the file is written")
    assert not open_trx and lock_error is None, t(
        "写文件期间仍持有数据库事务/行锁：claim 与 finish 各用一个短 transaction()，文件写在两者之间",
        "a database transaction / row lock is held during the write: one short transaction() for claim, another "
        "for finish, the file in between")
    wait_task_end(result)
    row = wait_status(job_id, TERMINAL, 10)
    assert row["status"] == "succeeded", t(f"放行后任务结束于 {row['status']}", f"after the release the job ended "
                                           f"{row['status']}")
    c.note(t("放行后任务 succeeded", "released: the job succeeded"))


# ---------------------------------------------------------------- 11.5

def check_backoff(c, workers: Workers) -> None:
    state_store, export_products = store(), export_task()
    workers.ensure()
    job_id = state_store.submit_snapshot([41])
    sql("UPDATE export_jobs SET next_attempt_at=DATE_ADD(NOW(6), INTERVAL 1 HOUR) WHERE id=%s", (job_id,))
    c.note(t(f"任务 {short(job_id)}：next_attempt_at 设为一小时后",
             f"job {short(job_id)}: next_attempt_at set one hour ahead"))

    results, go = [], threading.Event()

    def claimer():
        go.wait(10)
        try:
            results.append(claimed_token(state_store.claim(job_id)))
        except Exception as exc:  # noqa: BLE001
            results.append(f"error {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in pool:
        thread.start()
    go.set()
    for thread in pool:
        thread.join(15)
    c.note(t(f"4 个并发 claim() → {results}", f"4 concurrent claim() → {results}"))
    assert results == [None] * 4, t("next_attempt_at 未到，claim 却拿到了 token（或出错）",
                                    "claim got a token (or failed) before next_attempt_at")

    sent = [export_products.delay(job_id) for _ in range(3)]
    ends = [wait_task_end(result) for result in sent]
    c.note(t("3 条重复消息经 worker 执行：", "3 duplicate messages through the worker: ")
           + ", ".join(f"{e.get('state')} {json.dumps(e.get('retval'), default=str)[:60]}" for e in ends))
    row = job_row(job_id)
    c.note(t(f"之后的行：{row['status']}，attempts={row['attempts']}，lease_token={row['lease_token']}",
             f"the row afterwards: {row['status']}, attempts={row['attempts']}, lease_token={row['lease_token']}"))
    assert row["status"] == "queued" and row["attempts"] == 0 and row["lease_token"] is None, t(
        "重复消息绕过了 next_attempt_at：claim 的 SELECT 与 UPDATE 都要带 next_attempt_at<=NOW(6)",
        "a duplicate message skipped next_attempt_at: both the SELECT and the UPDATE in claim need "
        "next_attempt_at<=NOW(6)")

    sql("UPDATE export_jobs SET next_attempt_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
    token = claimed_token(state_store.claim(job_id))
    assert token, t("next_attempt_at 移到过去后仍领取不到：挡住领取的不只是退避", "still not claimable with "
                    "next_attempt_at in the past: something besides the backoff blocks the claim")
    c.note(t("next_attempt_at 移到过去（UPDATE，不等待）→ claim 得到 token，attempts=1",
             "next_attempt_at moved into the past (an UPDATE, no waiting) → claim gets a token, attempts=1"))


# ---------------------------------------------------------------- 11.6

def check_recovery(c, workers: Workers) -> None:
    state_store, export_products = store(), export_task()
    workers.ensure()
    job_id = state_store.submit_snapshot([51, 52])
    snapshot = products([51, 52])
    old = claimed_token(state_store.claim(job_id))
    assert old, t("新任务第一次 claim 拿不到 token", "the first claim of a fresh job got no token")
    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
    c.note(t(f"任务 {short(job_id)} 被旧执行者领取，租约移到过去（running + 已过期）",
             f"job {short(job_id)} claimed by an old executor, lease moved into the past (running + expired)"))

    direct = state_store.claim(job_id)
    assert direct is None, t("过期的 running 被直接领取了：claim 只接受 status='queued'，过期租约要先经过恢复",
                             "an expired running job was claimed directly: claim accepts only status='queued'; an "
                             "expired lease needs the recovery transition first")
    end = wait_task_end(export_products.delay(job_id))
    row = job_row(job_id)
    c.note(t(f"恢复前：claim() → None；重复消息 → {json.dumps(end.get('retval'), default=str)[:60]}；"
             f"行仍 {row['status']}，attempts={row['attempts']}",
             f"before recovery: claim() → None; a duplicate message → "
             f"{json.dumps(end.get('retval'), default=str)[:60]}; "
             f"the row is still {row['status']}, attempts={row['attempts']}"))
    assert row["status"] == "running" and row["attempts"] == 1 and row["lease_token"] == old, t(
        "恢复前，重复消息抢占了过期的 running 任务",
        "before recovery a duplicate message took over the expired running job")

    assert sql_count(RECOVER_SQL, (job_id,)) == 1, t("恢复转换没有作用到这一行",
                                                     "the recovery transition missed the row")
    row = job_row(job_id)
    assert row["attempts"] == 1, t("恢复不能改 attempts", "recovery must not change attempts")
    end = wait_task_end(export_products.delay(job_id))
    row = wait_status(job_id, TERMINAL, 10)
    c.note(t(f"恢复转换（running → queued，attempts 保留）后发消息：worker → "
             f"{json.dumps(end.get('retval'), default=str)[:80]}",
             f"after the recovery transition (running → queued, attempts kept) a message: worker → "
             f"{json.dumps(end.get('retval'), default=str)[:80]}"))
    assert row["status"] == "succeeded", t(f"恢复后任务结束于 {row['status']}",
                                           f"after recovery the job ended {row['status']}")
    assert row["attempts"] == 2, t(f"恢复后的领取应是 attempts == 2，实际 {row['attempts']}",
                                   f"the claim after recovery should be attempts == 2, got {row['attempts']}")
    assert row["lease_token"] != old, t("发布的仍是旧 token", "the old token is the one that published")
    path, written = published_file(row)
    assert same_rows(written, snapshot), t("新 token 发布的文件不是任务快照",
                                           "the new token's file is not the job's snapshot")
    assert state_store.finish(job_id, old, "artifacts/stale.json") is False and \
        job_row(job_id)["result_ref"] == row["result_ref"], t("旧 token 仍能发布", "the old token can still publish")
    c.note(t(f"succeeded，attempts=2，result_ref={path.name}（新 token 的文件）；旧 token finish → False",
             f"succeeded, attempts=2, result_ref={path.name} (the new token's file); old token finish → False"))

    done = run_python(["verify_lease.py"], cwd=WORK, timeout=30)
    tail = [line for line in redact(done.stdout).splitlines() if line.strip()][-3:]
    c.note(t(f"python verify_lease.py → 退出码 {done.returncode}",
             f"python verify_lease.py → exit code {done.returncode}"))
    for line in tail:
        c.note("  " + line[:200])
    assert done.returncode == 0 and "lease ownership verified" in done.stdout, t(
        "verify_lease.py 没有打印 lease ownership verified（见上方输出）",
        "verify_lease.py did not print lease ownership verified (see the output above)")


# ---------------------------------------------------------------- 11.7

def http_get(port: int, job_id: str):
    import httpx2
    return httpx2.get(f"http://127.0.0.1:{port}/exports/{job_id}", timeout=10)


def start_api(log_name: str, env: dict | None = None) -> tuple[Process, int]:
    port = free_port()
    proc = Process([sys.executable, "-m", "uvicorn", "api_db:app", "--host", "127.0.0.1", "--port", str(port)],
                   cwd=WORK, log_path=LOG_DIR / log_name, env=env)
    try:
        proc.wait_ready(20, port=port)
    except BaseException:
        proc.stop()
        raise
    return proc, port


def check_http(c) -> None:
    if not (WORK / "api_db.py").is_file():
        c.skip(t("没有 api_db.py（课程正文只要求“另行接入”；按本课指南添加后会检查）",
                 "no api_db.py (the course text only says to add an HTTP adapter; add it from this lesson's guide "
                 "to have it checked)"))
    state_store, export_products = store(), export_task()
    queued = state_store.submit_snapshot([55])
    direct = str(uuid4())
    sql("INSERT INTO export_jobs (id, status, payload, attempts, deadline_at, result_ref) VALUES "
        "(%s, 'succeeded', '[]', 1, DATE_ADD(NOW(6), INTERVAL 10 MINUTE), 'artifacts/written-by-sql.json')", (direct,))
    missing = str(uuid4())
    celery_state = export_products.AsyncResult(queued).state
    proc, port = start_api("api_db.log")
    try:
        answers = {}
        for name, job_id in (("queued", queued), ("sql", direct), ("missing", missing)):
            response = http_get(port, job_id)
            answers[name] = response
            c.note(f"GET /exports/{short(job_id)} → {response.status_code} {redact(response.text)[:120]}")
        sql("UPDATE export_jobs SET status='failed', error_code='drill' WHERE id=%s", (queued,))
        changed = http_get(port, queued)
        c.note(t(f"用 SQL 把它改成 failed 后 → {changed.status_code} {redact(changed.text)[:80]}",
                 f"after SQL sets it to failed → {changed.status_code} {redact(changed.text)[:80]}"))
    finally:
        proc.stop()

    def status_of(response) -> str | None:
        with contextlib.suppress(ValueError, AttributeError):
            return response.json().get("status")
        return None

    assert answers["queued"].status_code == 200 and status_of(answers["queued"]) == "queued", t(
        f"没人执行过的 queued 任务（Celery 显示 {celery_state}）应为 200 且 status=queued：PENDING 不等于不存在",
        f"a queued job nobody ran (Celery says {celery_state}) must be 200 with status=queued: PENDING is not "
        "missing")
    assert answers["sql"].status_code == 200 and status_of(answers["sql"]) == "succeeded", t(
        "只用 SQL 写入的行应为 200 succeeded：查询路径要读 export_jobs", "a row written by SQL alone must be 200 "
        "succeeded: the read path must use export_jobs")
    assert changed.status_code == 200 and status_of(changed) == "failed", t(
        "SQL 改了状态，接口没有反映：每次请求都要读数据库",
        "SQL changed the status and the API did not show it: read the "
        "database on every request")
    assert answers["missing"].status_code == 404, t(f"不存在的 id 应为 404，实际 {answers['missing'].status_code}",
                                                    f"an unknown id must be 404, got {answers['missing'].status_code}")

    url = urlsplit(setting("DATABASE_URL"))
    closed = free_port()
    dead_url = urlunsplit(url._replace(netloc=url.netloc.rsplit(":", 1)[0] + f":{closed}"))
    proc, port = start_api("api_db-no-database.log", env=dict(os.environ, DATABASE_URL=dead_url))
    try:
        unreachable = http_get(port, queued)
    finally:
        proc.stop()
    c.note(t(f"数据库不可达时（端口 {closed} 无服务）同一个 id → {unreachable.status_code}",
             f"with the database unreachable (nothing on port {closed}) the same id → {unreachable.status_code}"))
    assert unreachable.status_code != 404 and unreachable.status_code >= 500, t(
        f"数据库不可达时应是 5xx，而不是 {unreachable.status_code}：404 只表示没有这一行",
        f"with the database unreachable the answer must be 5xx, not {unreachable.status_code}: 404 means only "
        "that no row exists")


# ---------------------------------------------------------------- 11.8

def check_bad_input(c) -> None:
    state_store = store()
    # 101 products that all exist, so "over 100" is refused for its size and not for a missing id.
    sql("INSERT INTO products (id, name, description, is_active, price_cents) VALUES " +
        ",".join(f"({n}, 'bulk-{n}', 'lesson 11 size drill', 1, {n})" for n in range(1001, 1102)))
    cases = [
        (t("空列表", "empty list"), []),
        (t("101 个存在的编号", "101 existing ids"), list(range(1001, 1102))),
        ("0", [0]),
        ("-3", [5, -3]),
        ('"7"', ["7"]),
        ("7.0", [7.0]),
        ("True", [True]),
        (t("不存在的 999999", "missing 999999"), [5, 999999]),
    ]
    problems = []
    for label, ids in cases:
        before = job_count()
        try:
            job_id = state_store.submit_snapshot(ids)
            outcome, message = "accepted", job_id
        except (ValueError, TypeError) as exc:
            outcome, message = type(exc).__name__, str(exc)
        except Exception as exc:  # noqa: BLE001 - the wrong kind of error is a finding, not a crash
            outcome, message = f"{type(exc).__name__} (unexpected)", str(exc)
        left = job_count() - before
        c.note(f"{label:<20} → {outcome}: {redact(message)[:70]}" + (t(f"，多出 {left} 行", f", {left} row(s) left")
                                                                     if left else ""))
        if outcome not in ("ValueError", "TypeError") or not message.strip() or left:
            problems.append((label, outcome, left))
    before = job_count()
    hundred = state_store.submit_snapshot(list(range(1001, 1101)))
    c.note(t(f"恰好 100 个存在的编号 → 接受（{short(hundred)}）",
             f"exactly 100 existing ids → accepted ({short(hundred)})"))
    assert job_count() == before + 1
    assert not problems, t(
        f"这些输入没有明确报错或留下了任务行：{problems}（先在同一事务里 read_snapshot 校验，再 INSERT）",
        f"these inputs got no clear error or left a job row: {problems} (validate with read_snapshot before the "
        "INSERT, in the same transaction)")


# ---------------------------------------------------------------- 11.9

PROBE_URLS = r"""
import contextlib, io, json, os, sys, traceback
cases = json.loads(sys.argv[1])
import state_store
for name, url in cases:
    if url is not None:
        os.environ["DATABASE_URL"] = url
    captured = io.StringIO()
    error, trace, value_error = "", "", False
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            conn = state_store.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
            finally:
                conn.close()
            outcome = "connected"
        except BaseException as exc:
            outcome, error, trace = type(exc).__name__, str(exc), traceback.format_exc()
            value_error = isinstance(exc, ValueError)
    print(json.dumps({"name": name, "outcome": outcome, "error": error, "trace": trace,
                      "value_error": value_error, "output": captured.getvalue()}), flush=True)
"""


def check_url(c) -> None:
    store()
    marker = "Lab11" + uuid4().hex[:10]  # a fake password: it must never come back in any output
    good = urlsplit(setting("DATABASE_URL"))
    host, database = f"{good.hostname}:{good.port}", unquote(good.path.lstrip("/"))
    cases = [
        ("real", None),
        ("scheme mysql://", f"mysql://app_user:{marker}@{host}/{database}"),
        ("scheme postgresql://", f"postgresql://app_user:{marker}@{host}/{database}"),
        ("no host", f"mysql+pymysql://app_user:{marker}@:3307/{database}"),
        ("no user", f"mysql+pymysql://:{marker}@{host}/{database}"),
        ("no password", f"mysql+pymysql://app_user@{host}/{database}"),
        ("port not a number", f"mysql+pymysql://app_user:{marker}@{good.hostname}:3x07/{database}"),
        ("#fragment", f"mysql+pymysql://app_user:{marker}@{host}/{database}#x"),
        ("?ssl=false", f"mysql+pymysql://app_user:{marker}@{host}/{database}?ssl=false"),
        ("database 'shop lab'", f"mysql+pymysql://app_user:{marker}@{host}/shop%20lab"),
        ("no database", f"mysql+pymysql://app_user:{marker}@{host}/"),
        ("password %zz", f"mysql+pymysql://app_user:{marker}%zz@{host}/{database}"),
        ("password ends in %", f"mysql+pymysql://app_user:{marker}%@{host}/{database}"),
        ("password %E9 (not UTF-8)", f"mysql+pymysql://app_user:{marker}%E9@{host}/{database}"),
    ]
    done = run_python(["-c", PROBE_URLS, json.dumps(cases)], cwd=WORK, timeout=60)
    results = {}
    for line in done.stdout.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            results[item["name"]] = item
    assert results, t("探测进程没有输出：\n", "the probe printed nothing:\n") + redact(done.stdout)[-400:]
    leaks, wrong = [], []
    secret_forms = {marker, quote(marker, safe="")}
    for name, _ in cases:
        item = results.get(name)
        if item is None:
            wrong.append((name, "no result"))
            continue
        everything = item["error"] + item["trace"] + item["output"]
        leaked = any(form in everything for form in secret_forms)
        c.note(f"{name:<26} → {item['outcome']}: {redact(item['error']).replace(marker, '<PASSWORD>')[:80]}"
               + (t("  ← 泄露了密码", "  ← reveals the password") if leaked else ""))
        if leaked:
            leaks.append(name)
        if name == "real":
            if item["outcome"] != "connected":
                wrong.append((name, item["outcome"]))
        elif not item["value_error"]:
            wrong.append((name, item["outcome"]))
    assert not leaks, t(f"错误信息或输出里出现了密码：{leaks}（只说哪部分不对，不回显 URL）",
                        f"the password appears in the error or output: {leaks} (name the wrong part, never echo "
                        "the URL)")
    assert not wrong, t(f"这些 URL 没有在连接前以 ValueError 拒绝（或真实 URL 连不上）：{wrong}",
                        f"these URLs were not refused with a ValueError before connecting (or the real URL did not "
                        f"connect): {wrong}")


# ---------------------------------------------------------------- 11.10

def find_renewal(state_store):
    for name, fn in inspect.getmembers(state_store, inspect.isfunction):
        if fn.__module__ == state_store.__name__ and re.search(r"renew|extend|heartbeat", name, re.I):
            return name, fn
    return None, None


def server_now():
    return sql("SELECT NOW(6) AS now")[0]["now"]


def lease_seconds(job_id: str) -> float:
    row = sql("SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until) / 1e6 AS s FROM export_jobs WHERE id=%s",
              (job_id,))[0]
    return float(row["s"])


def check_renew(c) -> None:
    state_store = store()
    name, renew = find_renewal(state_store)
    if renew is None:
        c.skip(t("state_store 里没有续租函数（名字含 renew，如 renew_lease(job_id, token)）",
                 "state_store has no renewal function (a name with renew, e.g. renew_lease(job_id, token))"))
    job_id = state_store.submit_snapshot([58])
    token = claimed_token(state_store.claim(job_id))
    assert token, t("新任务第一次 claim 拿不到 token", "the first claim of a fresh job got no token")

    sql("UPDATE export_jobs SET lease_until=DATE_ADD(NOW(6), INTERVAL 5 SECOND) WHERE id=%s", (job_id,))
    # The renewal's NOW(6) lies between the server's clock read just before and just after the call, so
    # lease_until - 30 s must too, however slowly the call ran (1 s of slack for a clock read in Python).
    before = server_now()
    ok = renew(job_id, token)
    after = server_now()
    until = job_row(job_id)["lease_until"]
    since_start, since_end = (until - before).total_seconds(), (until - after).total_seconds()
    c.note(t(f"{name}：剩 5 秒的租约 → {ok}，lease_until = 调用开始后 {since_start:.2f} 秒 / 结束后 {since_end:.2f} 秒",
             f"{name}: a lease with 5 s left → {ok}, lease_until = {since_start:.2f} s after the call began / "
             f"{since_end:.2f} s after it returned"))
    assert ok is True and since_start >= 29 and since_end <= 31, t(
        "有效租约应返回 True 并延长到续租时刻之后 30 秒", "a live lease must give True and end 30 s after the renewal")

    before = lease_seconds(job_id)
    foreign = renew(job_id, str(uuid4()))
    c.note(t(f"陌生 token → {foreign}", f"a foreign token → {foreign}"))
    assert foreign is False and lease_seconds(job_id) <= before, t("陌生 token 也能续租", "a foreign token renewed")

    sql("UPDATE export_jobs SET deadline_at=DATE_ADD(NOW(6), INTERVAL 10 SECOND) WHERE id=%s", (job_id,))
    first, second = renew(job_id, token), renew(job_id, token)
    capped = sql("SELECT lease_until = deadline_at AS capped FROM export_jobs WHERE id=%s", (job_id,))[0]["capped"]
    c.note(t(f"deadline_at 在 10 秒后：续租 → {first}，再续一次（同一截止值）→ {second}，"
             f"lease_until = deadline_at：{bool(capped)}",
             f"deadline_at 10 s ahead: renew → {first}, again (same end time) → {second}, lease_until = "
             f"deadline_at: {bool(capped)}"))
    assert capped, t("续租超过了 deadline_at：用 LEAST(…, deadline_at)", "the renewal went past deadline_at: use "
                     "LEAST(…, deadline_at)")
    assert first is True and second is True, t(
        "租约仍有效却返回 False：同一截止值会让 rowcount 为 0，要在同一事务里再 SELECT 确认",
        "False although the lease is live: the same end time gives rowcount 0, so confirm with a SELECT in the same "
        "transaction")

    sql("UPDATE export_jobs SET deadline_at=DATE_ADD(NOW(6), INTERVAL 10 MINUTE), cancel_requested=TRUE WHERE id=%s",
        (job_id,))
    cancelled = renew(job_id, token)
    sql("UPDATE export_jobs SET cancel_requested=FALSE WHERE id=%s", (job_id,))
    c.note(t(f"已请求取消 → {cancelled}", f"cancel requested → {cancelled}"))
    assert cancelled is False, t("已取消的任务仍能续租", "a cancelled job was renewed")

    sql("UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE id=%s", (job_id,))
    revived = renew(job_id, token)
    still = lease_seconds(job_id)
    c.note(t(f"租约已过期 → {revived}，lease_until 仍在过去（{still:.1f} 秒）",
             f"lease expired → {revived}, lease_until stays in the past ({still:.1f} s)"))
    assert revived is False and still < 0, t("过期租约被续活了：过期后必须重新领取",
                                             "an expired lease came back to life: "
                                             "after expiry only a new claim helps")

    queued = state_store.submit_snapshot([59])
    idle = renew(queued, token)
    c.note(t(f"queued 任务（没有租约）→ {idle}", f"a queued job (no lease) → {idle}"))
    assert idle is False, t("没有租约的 queued 任务也能续租", "a queued job without a lease was renewed")


# ---------------------------------------------------------------- main

@contextlib.contextmanager
def explained():
    """Turn the one known server mismatch into a pointer to the guide instead of a bare traceback."""
    try:
        yield
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1193 and "max_execution_time" in str(exc):
            raise AssertionError(mariadb_hint()) from None
        raise


def main(tap) -> None:
    workers = Workers()
    HOLD_LIST.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tap.check("11.1") as c, explained():
            c.skip_unless_selected()
            check_durable(c, workers)
        with tap.check("11.2") as c, explained():
            c.skip_unless_selected()
            check_single_claim(c)
        with tap.check("11.3") as c, explained():
            c.skip_unless_selected()
            check_old_token(c)
        with tap.check("11.4") as c, explained():
            c.skip_unless_selected()
            check_no_transaction(c, workers)
        with tap.check("11.5") as c, explained():
            c.skip_unless_selected()
            check_backoff(c, workers)
        with tap.check("11.6") as c, explained():
            c.skip_unless_selected()
            check_recovery(c, workers)
        with tap.check("11.7") as c, explained():
            c.skip_unless_selected()
            check_http(c)
        with tap.check("11.8") as c, explained():
            c.skip_unless_selected()
            check_bad_input(c)
        with tap.check("11.9") as c, explained():
            c.skip_unless_selected()
            check_url(c)
        with tap.check("11.10") as c, explained():
            c.skip_unless_selected()
            check_renew(c)
    finally:
        workers.stop_all()


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
