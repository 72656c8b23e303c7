"""Verifier for lesson 13: a capacity gate in front of submit, and short and long jobs on separate queues.

Limit L below is the configured one: the default of admit_export's `limit` parameter (the value
every path that calls admit_export(cur) uses; the course's default is 100).

13.1  Leftover rows (queued, running, some without any outbox event) fill all but one place: L-1.
      Three producer processes submit at the same moment; a kit trigger holds the first INSERT
      for an instant (the kit's user lock) until all three have reached the database — with the gate,
      the other two are waiting for the gate row; without it, all three have counted L-1.  Exactly
      one is admitted, queued+running == L.  Then, without the trigger, 3 processes × 4 submits at
      L-3: exactly 3 admitted, the rest CapacityExceeded, queued+running == L
13.2  Submits of 1, 30, 31 and 60 products: the events say exports.fast, exports.fast, exports.bulk,
      exports.bulk; the learner's publish_one sends them; the fast@ worker runs exactly the first two
      and the bulk@ worker exactly the last two (each delivery's node and queue are recorded)
13.3  The HTTP submit (the folder's api_db.py POST /exports, or the kit's route around accept_export):
      at L-1 a POST is 202 with a job id that has its job row and event; at L a POST is 503 with
      Retry-After: 5, no job id, and no new job or event row
13.4  Both workers paused (SIGSTOP, by PID); a leftover running job an hour old; up to 6 short jobs
      and 1 long one submitted and aged 70…10 s (created_at moved back by UPDATE, not waited for).  The
      course's backlog queries show them; workers and publisher resume; the queued group's oldest
      age falls while jobs still wait (the oldest is served first) and the queue drains; the leftover
      running row still shows in its own group
13.5  Two long jobs go to the bulk worker and are held there (the probe keeps the first one writing):
      the bulk worker is busy, the second waits.  A short job submitted now completes on fast@ while
      the bulk job is still held
13.6  exercise, with EXPORT_ADMISSION_LIMIT=5 in the environment of every process the kit starts
      (or a limit of 5 written in the code): admit_export's default is 5; two producers from empty
      admit exactly 5; at 5 the direct admit_export(cur) call, the HTTP submit and python
      submit_db_export.py all refuse, and one place freed lets the HTTP submit in again; finally two
      producers at the edge (4 rows, one of them running, first INSERT held) admit exactly one.
      SKIP when nothing refuses below 100 (the limit was not lowered)

The checker starts its own two workers (celery -A lab13_probe:app … -Q exports.fast / exports.bulk,
--concurrency=1, --prefetch-multiplier=1, -n fast@%h / bulk@%h) when a check first needs them, and
stops them by PID.  It reads the database through its own connections and never prints credentials.
Every check starts from a clean backlog: queued/running rows of earlier checks are cancelled, their
unsent events marked sent, the two queues emptied.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
import time
from uuid import uuid4

import pymysql

from shared.celerylab import LOG_DIR, WORK, import_learner, redact, redis_client
from shared.i18n import t
from shared.labdb import db_settings, kit_db, sql
from shared.proc import Process, WaitTimeout, free_port, run_python, wait_until

# 13.1–13.5 check the configured default; 13.6 sets the experiment's value for its own processes only.
os.environ.pop("EXPORT_ADMISSION_LIMIT", None)

EVENTS = LOG_DIR / "lab13-events.jsonl"
HOLD_LIST = LOG_DIR / "lab13-hold.txt"
TOOLS = str(WORK / "lab13_tools.py")
TERMINAL = ("succeeded", "failed", "cancelled")
QUEUES = ("exports.fast", "exports.bulk")
LOCK_WAIT_TIMEOUT = 1205  # both servers: a gate waiter that ran out of innodb_lock_wait_timeout

BACKLOG_JOBS = """SELECT status, COUNT(*) AS jobs,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6))/1000000 AS oldest_age_seconds
FROM export_jobs WHERE status IN ('queued','running') GROUP BY status"""
BACKLOG_OUTBOX = """SELECT queue_name, COUNT(*) AS unpublished,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6))/1000000 AS oldest_unpublished_seconds
FROM export_outbox WHERE sent_at IS NULL GROUP BY queue_name"""


def short(value) -> str:
    return f"{str(value)[:8]}…"


# ---------------------------------------------------------------- the kit's own view of the database

def active_count() -> int:
    return int(sql("SELECT COUNT(*) AS n FROM export_jobs WHERE status IN ('queued','running')")[0]["n"])


def counts() -> tuple[int, int]:
    row = sql("SELECT (SELECT COUNT(*) FROM export_jobs) AS jobs, (SELECT COUNT(*) FROM export_outbox) AS events")[0]
    return int(row["jobs"]), int(row["events"])


def job_row(job_id: str) -> dict | None:
    rows = sql("SELECT id, status, attempts, result_ref FROM export_jobs WHERE id=%s", (job_id,))
    return rows[0] if rows else None


def event_of(job_id: str) -> dict | None:
    rows = sql("SELECT id, queue_name, sent_at FROM export_outbox WHERE job_id=%s ORDER BY created_at, id", (job_id,))
    return rows[0] if rows else None


def reset() -> None:
    """A clean backlog for the check that calls it (each check must stand alone)."""
    drop_trigger()
    with kit_db() as cur:
        cur.execute("UPDATE export_jobs SET status='cancelled', cancel_requested=TRUE, updated_at=NOW(6) "
                    "WHERE status IN ('queued','running')")
        # Their events need no sending any more: marked sent, nothing goes to the broker.
        cur.execute("UPDATE export_outbox SET sent_at=NOW(6), claim_until=NULL WHERE sent_at IS NULL")
    client = redis_client()
    try:
        client.delete(*QUEUES)
    finally:
        client.close()
    HOLD_LIST.unlink(missing_ok=True)


def add_filler(n: int, running: int = 0, with_events: int = 0, age_seconds: int = 0) -> list[str]:
    """n kit rows that hold capacity like leftovers of earlier exercises: `running` of them running
    (a live lease of 10 minutes, so nothing claims them), `with_events` of the queued ones with an
    unsent event, the rest bare queued rows."""
    ids = [str(uuid4()) for _ in range(n)]
    with kit_db() as cur:
        for k, job in enumerate(ids):
            status = "running" if k < running else "queued"
            cur.execute(
                "INSERT INTO export_jobs (id, status, payload, attempts, lease_token, lease_until, deadline_at, "
                "created_at) VALUES (%s, %s, '[]', IF(%s='running', 1, 0), IF(%s='running', UUID(), NULL), "
                "IF(%s='running', DATE_ADD(NOW(6), INTERVAL 10 MINUTE), NULL), "
                "DATE_ADD(NOW(6), INTERVAL 10 MINUTE), DATE_SUB(NOW(6), INTERVAL %s SECOND))",
                (job, status, status, status, status, age_seconds))
        events = [job for k, job in enumerate(ids) if k >= running][:with_events]
        if events:
            cur.executemany("INSERT INTO export_outbox (id, job_id) VALUES (%s, %s)",
                            [(str(uuid4()), job) for job in events])
    return ids


# ---------------------------------------------------------------- kit trigger: hold the first INSERT

MARKS = "lab13_kit_marks"
TRIGGER = "lab13_kit_slow_insert"


def lock_name() -> str:
    return f"lab13-gate-{db_settings()['database']}"  # user locks are server-wide: one per slot


def drop_trigger() -> None:
    sql(f"DROP TRIGGER IF EXISTS {TRIGGER}")
    sql(f"CREATE TABLE IF NOT EXISTS {MARKS} (kind VARCHAR(16) PRIMARY KEY) ENGINE=InnoDB")
    sql(f"DELETE FROM {MARKS}")


@contextlib.contextmanager
def insert_hold():
    """While active, a job INSERT waits (at most 2.5 s) for the kit's user lock, which the kit holds.

    Yields a function that releases the lock.  The trigger changes nothing else: it only stretches
    the moment between a submit's count and its insert, as a slow disk or a busy server would.
    """
    drop_trigger()
    body = f"""CREATE TRIGGER {TRIGGER} BEFORE INSERT ON export_jobs FOR EACH ROW
               BEGIN
                 IF EXISTS (SELECT 1 FROM {MARKS} WHERE kind='hold') THEN
                   DO GET_LOCK('{lock_name()}', 2.5);
                   DO RELEASE_LOCK('{lock_name()}');
                 END IF;
               END"""
    try:
        sql(body)
    except pymysql.MySQLError as exc:
        raise AssertionError(t(f"检查器无法创建触发器（错误 {exc.args[0]}）：账号需要 TRIGGER 权限；MySQL 开启 binlog 时"
                               "还需要 log_bin_trust_function_creators=1",
                               f"the checker cannot create its trigger (error {exc.args[0]}): the account needs the "
                               "TRIGGER privilege, and MySQL with binary logging on needs "
                               "log_bin_trust_function_creators=1")) from None
    holder = pymysql.connect(**db_settings(), autocommit=True, connect_timeout=3, read_timeout=10)
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            with holder.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", (lock_name(),))
            released = True

    try:
        with holder.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 2)", (lock_name(),))
            assert cur.fetchone()[0] == 1, "the kit could not take its own user lock"
        sql(f"INSERT INTO {MARKS} (kind) VALUES ('hold')")
        yield release
    finally:
        with contextlib.suppress(Exception):
            release()
        holder.close()
        drop_trigger()


def waiting_sessions() -> dict:
    """Sessions of this schema inside a statement right now: on the kit's user lock (the held INSERT),
    or in any other statement (with the gate: its SELECT … FOR UPDATE).  PROCESSLIST only: INNODB_TRX
    is a cache that a poll more often than every 0.1 s never refreshes."""
    database = db_settings()["database"]
    rows = sql("SELECT STATE AS state, LEFT(INFO, 200) AS info FROM information_schema.PROCESSLIST "
               "WHERE DB=%s AND ID<>CONNECTION_ID() AND COMMAND='Query'", (database,))
    insert = [r for r in rows if "user lock" in (r["state"] or "").lower()]
    other = [" ".join(str(r["info"] or "").split())[:70] for r in rows if r not in insert]
    return {"insert": len(insert), "other": len(other), "statements": sorted(set(other))}


# ---------------------------------------------------------------- the learner's modules

_import = import_learner  # a learner module with the functions a check needs


def store():
    return _import("state_store", ("transaction", "submit_snapshot", "admit_export", "lock_admission",
                                   "CapacityExceeded"))


def configured_limit(state_store) -> int:
    param = inspect.signature(state_store.admit_export).parameters.get("limit")
    default = None if param is None else param.default
    assert type(default) is int and default >= 1, t(
        f"admit_export 需要一个带正整数默认值的 limit 参数（现在：{default!r}）：它就是所有提交路径共用的容量",
        f"admit_export needs a limit parameter with a positive integer default (found {default!r}): it is the one "
        "capacity every submit path uses")
    return default


def submit_quietly(state_store, product_ids: list[int]) -> str:
    try:
        return state_store.submit_snapshot(product_ids)
    except state_store.CapacityExceeded:
        raise AssertionError(t(f"提交被 CapacityExceeded 拒绝，而排队+执行中只有 {active_count()} 个",
                               f"the submit was refused with CapacityExceeded while only {active_count()} jobs are "
                               "queued or running")) from None


# ---------------------------------------------------------------- producer processes (the learner's submit_snapshot)

def classify(results: list[dict]) -> dict:
    out = {"ok": [], "capacity": 0, "lock_wait": 0, "errors": []}
    for r in results:
        if "ok" in r:
            out["ok"].append(r["ok"])
        elif "capacity" in r:
            out["capacity"] += 1
        elif r.get("code") == LOCK_WAIT_TIMEOUT:
            out["lock_wait"] += 1
        else:
            out["errors"].append(redact(r.get("error", "?")))
    return out


class Producers:
    """Producer processes, each started round by round by a go file (so all of them start together)."""

    def __init__(self, names: list[str], env: dict | None = None):
        self.names = names
        self.folder = LOG_DIR / f"lab13-producers-{uuid4().hex[:8]}"
        self.folder.mkdir(parents=True)
        self.round = 0
        self.procs = {name: Process([sys.executable, TOOLS, "produce", str(self.folder), name], cwd=WORK,
                                    log_path=self.folder / f"{name}.log", env=env) for name in names}
        try:
            wait_until(lambda: all((self.folder / f"ready-{n}").exists() or not self.procs[n].alive() for n in names),
                       30, "the producer processes to start", interval=0.02)
            dead = [n for n in names if not self.procs[n].alive()]
            assert not dead, t(f"生产者进程无法启动：{redact(self.procs[dead[0]].log_tail(4))}",
                               f"a producer process could not start: {redact(self.procs[dead[0]].log_tail(4))}")
        except BaseException:
            self.stop()
            raise

    def go(self, n: int, ids: list[int]) -> int:
        self.round += 1
        plan = json.dumps({"n": n, "ids": ids})
        for name in self.names:  # written whole, then renamed: a producer never reads half a plan
            tmp = self.folder / f".go-{name}-{self.round}"
            tmp.write_text(plan)
            os.replace(tmp, self.folder / f"go-{name}-{self.round}")
        return self.round

    def done(self, round_no: int) -> int:
        return sum((self.folder / f"res-{n}-{round_no}").exists() for n in self.names)

    def results(self, round_no: int, seconds: float) -> list[dict]:
        try:
            wait_until(lambda: self.done(round_no) == len(self.names), seconds, "the producers' results", interval=0.01)
        except WaitTimeout:
            raise AssertionError(t(f"{seconds:g} 秒内只有 {self.done(round_no)}/{len(self.names)} 个生产者完成提交",
                                   f"only {self.done(round_no)}/{len(self.names)} producers finished their submits "
                                   f"within {seconds:g}s")) from None
        found = []
        for name in self.names:
            found.extend(json.loads((self.folder / f"res-{name}-{round_no}").read_text()))
        return found

    def stop(self) -> None:
        (self.folder / "stop").write_text("stop")
        for proc in self.procs.values():
            proc.stop(grace=3)


def race_at_edge(c, producers: Producers, limit: int, running: int, bare: int) -> dict:
    """limit-1 places taken; every producer submits once at the same moment; the first INSERT is held
    until all of them have reached the database.  Returns the outcomes and what the kit saw waiting."""
    reset()
    add_filler(limit - 1, running=running, with_events=max(0, limit - 1 - running - bare))
    size = len(producers.names)
    with insert_hold() as release:
        round_no = producers.go(1, [2])
        streak = []

        def all_arrived():
            # Everyone is either held in the INSERT, stuck in another statement (the gate) or done —
            # seen twice in a row, so a statement that merely happened to be running does not count.
            now = waiting_sessions()
            done = producers.done(round_no)
            streak.append(now["insert"] >= 1 and now["insert"] + now["other"] + done >= size or done == size)
            return len(streak) >= 2 and streak[-1] and streak[-2]
        try:
            wait_until(all_arrived, 8, "every producer to reach the database", interval=0.005)
        except WaitTimeout:
            c.note(t("  （8 秒内没有看到所有生产者同时等待；照常放行）",
                     "  (not every producer was seen waiting within 8 s; released anyway)"))
        seen = waiting_sessions()
        release()
        outcome = classify(producers.results(round_no, 15))
    return {**outcome, "seen": seen, "active": active_count()}


def outcome_text(o: dict) -> str:
    parts = [f"{len(o['ok'])} admitted", f"{o['capacity']} CapacityExceeded"]
    if o["lock_wait"]:
        parts.append(f"{o['lock_wait']} lock wait timeout")
    if o["errors"]:
        parts.append(f"{len(o['errors'])} errors")
    return ", ".join(parts)


def outcome_zh(o: dict) -> str:
    parts = [f"受理 {len(o['ok'])}", f"CapacityExceeded {o['capacity']}"]
    if o["lock_wait"]:
        parts.append(f"锁等待超时 {o['lock_wait']}")
    if o["errors"]:
        parts.append(f"错误 {len(o['errors'])}")
    return "，".join(parts)


def assert_no_errors(o: dict) -> None:
    assert not o["errors"], t(f"提交出错：{o['errors'][0]}", f"a submit failed: {o['errors'][0]}")


# ---------------------------------------------------------------- workers and the publisher loop

_WORKERS: dict[str, Process] = {}


def workers() -> dict[str, Process]:
    """The lesson's two workers, started once (when a check first needs them) and shared."""
    if not _WORKERS:
        procs = {}
        for kind in ("fast", "bulk"):
            log = LOG_DIR / f"worker-{kind}.log"
            log.unlink(missing_ok=True)
            procs[kind] = Process([sys.executable, "-m", "celery", "-A", "lab13_probe:app", "worker", "-l", "INFO",
                                   "-Q", f"exports.{kind}", "--concurrency=1", "--prefetch-multiplier=1",
                                   "-n", f"{kind}@%h", "--without-mingle", "--without-gossip"],
                                  cwd=WORK, log_path=log)
        try:
            for proc in procs.values():
                proc.wait_ready(40, log_contains=" ready.")
        except BaseException:
            for proc in procs.values():
                proc.stop()
            raise
        _WORKERS.update(procs)
    for kind, proc in _WORKERS.items():
        assert proc.alive(), t(f"{kind} worker 已退出：{redact(proc.log_tail(4))}",
                               f"the {kind} worker exited: {redact(proc.log_tail(4))}")
    return _WORKERS


def pause(procs, sig: int) -> None:
    for proc in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


@contextlib.contextmanager
def publisher_loop():
    """The learner's publish_one, called in a loop by a kit process until the check is done."""
    folder = LOG_DIR / f"lab13-publisher-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    proc = Process([sys.executable, TOOLS, "publish", str(folder)], cwd=WORK, log_path=folder / "publisher.log")
    try:
        proc.wait_ready(20, log_contains="publisher loop running")
        yield proc
    finally:
        (folder / "stop").write_text("stop")
        proc.stop(grace=5)


def events() -> list[dict]:
    try:
        lines = EVENTS.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            found.append(json.loads(line))
    return found


def starts(job_id: str) -> list[dict]:
    return [e for e in events() if e.get("kind") == "start" and e.get("task") == "products.export"
            and (e.get("args") or [None])[0] == job_id]


def held(job_id: str) -> bool:
    return any(e.get("kind") == "hold" and e.get("job") == job_id for e in events())


def released(job_id: str) -> bool:
    return any(e.get("kind") == "release" and e.get("job") == job_id for e in events())


def wait_done(job_ids: list[str], seconds: float) -> dict[str, dict]:
    def all_done():
        rows = {j: job_row(j) for j in job_ids}
        return rows if all(r and r["status"] in TERMINAL for r in rows.values()) else None
    try:
        return wait_until(all_done, seconds, "the jobs to finish", interval=0.05)
    except WaitTimeout:
        return {j: job_row(j) for j in job_ids}


def stuck_reason(job_id: str) -> str:
    """Why a job did not finish: its event, the broker's queues, the deliveries (bilingual pieces)."""
    event = event_of(job_id)
    if event is None:
        return t("它没有 outbox 事件", "it has no outbox event")
    if event["sent_at"] is None:
        return t(f"它的事件（queue_name={event['queue_name']}）还没有发出：publisher 卡住了或出错（见 publisher 日志）",
                 f"its event (queue_name={event['queue_name']}) is still unsent: the publisher is stuck or failing "
                 "(see the publisher log)")
    from shared.celerylab import queued_task_ids
    for queue in ("exports", *QUEUES):
        if event["id"] in queued_task_ids(queue):
            if queue == "exports":
                return t('消息在 Redis 队列 exports 里等着，没有 worker 消费这个队列：send_task 要用 queue=event["queue_name"]',
                         'its message waits in the Redis queue exports, which no worker consumes: send_task needs '
                         'queue=event["queue_name"]')
            return t(f"消息在 Redis 队列 {queue} 里等着", f"its message waits in the Redis queue {queue}")
    seen = starts(job_id)
    unclaimed = [e for e in events() if e.get("kind") == "end" and e.get("task_id") == event["id"]
                 and isinstance(e.get("retval"), dict) and e["retval"].get("claimed") is False]
    row = job_row(job_id)
    if unclaimed and row and row["status"] == "queued":
        return t("worker 收到了消息，但 claim 返回 None（claimed False），而任务仍是 queued：那一刻这行被锁住了。"
                 "用 FOR UPDATE SKIP LOCKED 时，outbox 确认（更新 sent_at）的外键检查会让 claim 跳过它；"
                 "按 id 领取一个已知的行请用 FOR UPDATE（见本课指南）",
                 "the worker got the message but claim returned None (claimed False) while the job is still queued: "
                 "the row was locked at that instant. With FOR UPDATE SKIP LOCKED, the outbox confirm's foreign-key "
                 "check (it updates sent_at) makes claim skip it; claim one known row with FOR UPDATE (see the guide)")
    if seen:
        return t(f"它由 {seen[-1].get('node')} 从 {seen[-1].get('queue')} 取走，但还没结束",
                 f"{seen[-1].get('node')} took it from {seen[-1].get('queue')} but has not finished it")
    return t("它的事件已发出，但没有 worker 开始执行", "its event was sent but no worker started it")


# ---------------------------------------------------------------- HTTP submit path

def http_app() -> tuple[str, str]:
    """The folder's api_db:app when it has POST /exports, else the kit's route around accept_export."""
    _import("admission_adapter", ("accept_export",))
    with contextlib.suppress(Exception):
        import api_db
        for route in getattr(api_db.app, "routes", []):
            if getattr(route, "path", None) == "/exports" and "POST" in (getattr(route, "methods", None) or ()):
                return "api_db:app", "api_db.py POST /exports"
    return "lab13_api:app", t("套件的 POST /exports 路由包着你的 accept_export（api_db.py 里没有 POST /exports）",
                              "the kit's POST /exports route around your accept_export "
                              "(api_db.py has no POST /exports)")


@contextlib.contextmanager
def serve(app: str, env: dict | None = None):
    port = free_port()
    log = LOG_DIR / f"lab13-http-{port}.log"
    proc = Process([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)],
                   cwd=WORK, log_path=log, env=env)
    try:
        proc.wait_ready(20, port=port)
        import httpx2
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    except WaitTimeout as exc:
        raise AssertionError(t(f"HTTP 服务没有启动：{redact(str(exc))[-300:]}",
                               f"the HTTP app did not start: {redact(str(exc))[-300:]}")) from None
    finally:
        proc.stop()


def body_of(response) -> object:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


# ---------------------------------------------------------------- 13.1

def check_concurrent_limit(c) -> None:
    state_store = store()
    limit = configured_limit(state_store)
    assert limit >= 4, t(f"配置的容量 {limit} 太小，本项需要至少 4（练习的 5 见 13.6）",
                         f"the configured limit {limit} is too small for this item (at least 4; the exercise's 5 "
                         "is 13.6)")
    running, bare = max(1, (limit - 1) // 4), max(1, (limit - 1) // 4)
    producers = Producers(["P1", "P2", "P3"])
    try:
        race = race_at_edge(c, producers, limit, running=running, bare=bare)
        c.note(t(f"容量 L={limit}（admit_export 的默认值）；已有 {limit - 1} 行占位（其中 running {running}，"
                 f"没有 outbox 事件的 {bare}）",
                 f"limit L={limit} (admit_export's default); {limit - 1} rows already hold places ({running} running, "
                 f"{bare} without any outbox event)"))
        c.note(t(f"3 个进程同时提交，第一个 INSERT 被短暂按住：{race['seen']['insert']} 个停在 INSERT，"
                 f"{race['seen']['other']} 个停在 {'、'.join(race['seen']['statements']) or '（无）'}",
                 f"3 processes submit at once, the first INSERT held for a moment: {race['seen']['insert']} waiting "
                 f"inside the INSERT, {race['seen']['other']} in {'; '.join(race['seen']['statements']) or '(none)'}"))
        c.note(t(f"放行后 → {outcome_zh(race)}；queued+running = {race['active']}",
                 f"released → {outcome_text(race)}; queued+running = {race['active']}"))
        took_turns = race["seen"]["insert"] == 1 and race["seen"]["other"] >= 1
        assert race["active"] <= limit or took_turns, t(
            f"queued+running 达到 {race['active']}，超过容量 {limit}：只剩 1 个位置时 {len(race['ok'])} 个并发提交都被受理。"
            "在同一事务里先 SELECT … FOR UPDATE 锁住 export_admission_gate 的 id=1，再计数和插入",
            f"queued+running reached {race['active']}, past the limit {limit}: with one place left, {len(race['ok'])} "
            "concurrent submits were all admitted. Lock export_admission_gate id=1 with SELECT … FOR UPDATE first, "
            "then count and insert, in the same transaction")
        assert race["active"] <= limit, t(
            f"queued+running 达到 {race['active']}，超过容量 {limit}：提交在门闩处排了队，但计数仍放它们进来了。"
            "要数 status IN ('queued','running')：执行中的任务同样占着位置",
            f"queued+running reached {race['active']}, past the limit {limit}: the submits took turns at the gate, "
            "yet the count let them in. Count status IN ('queued','running'): a running job holds a place too")
        assert_no_errors(race)
        assert len(race["ok"]) == 1, t(
            f"只剩 1 个位置时应恰好受理 1 个，实际 {len(race['ok'])} 个（running 和没有事件的旧行也占容量吗？）",
            f"with one place left exactly 1 submit must be admitted, got {len(race['ok'])} (do running rows and old "
            "rows without an event count?)")

        reset()
        add_filler(limit - 3, running=running, with_events=max(0, limit - 3 - running - bare))
        burst_round = producers.go(4, [3])
        burst = classify(producers.results(burst_round, 20))
        active = active_count()
        c.note(t(f"不加触发器、剩 3 个位置：3 个进程各提交 4 次 → {outcome_zh(burst)}；queued+running = {active}",
                 f"no trigger, 3 places left: 3 processes × 4 submits → {outcome_text(burst)}; "
                 f"queued+running = {active}"))
        assert active <= limit, t(f"queued+running 达到 {active}，超过容量 {limit}",
                                  f"queued+running reached {active}, past the limit {limit}")
        assert_no_errors(burst)
        assert len(burst["ok"]) == 3, t(f"剩 3 个位置应恰好受理 3 个，实际 {len(burst['ok'])} 个",
                                        f"3 places left must admit exactly 3 submits, got {len(burst['ok'])}")
    finally:
        producers.stop()
        reset()


# ---------------------------------------------------------------- 13.2

def check_routing(c) -> None:
    state_store = store()
    _import("publisher", ("claim_event", "publish_one"))
    reset()
    procs = workers()
    cases = [(1, "exports.fast"), (30, "exports.fast"), (31, "exports.bulk"), (60, "exports.bulk")]
    jobs = []
    for size, queue in cases:
        job = submit_quietly(state_store, list(range(1, size + 1)))
        event = event_of(job)
        assert event is not None, t(f"{size} 个商品的任务没有 outbox 事件", f"the {size}-product job has no outbox event")
        jobs.append((job, size, queue, event))
    c.note(t("提交 1、30、31、60 个商品 → 事件 queue_name：" + "、".join(e["queue_name"] for *_, e in jobs),
             "submits of 1, 30, 31, 60 products → event queue_name: " + ", ".join(e["queue_name"] for *_, e in jobs)))
    for job, size, queue, event in jobs:
        assert event["queue_name"] == queue, t(
            f"{size} 个商品的事件 queue_name={event['queue_name']}，应为 {queue}（≤30 行走 exports.fast，更多走 exports.bulk）",
            f"the {size}-product event has queue_name={event['queue_name']}, expected {queue} (≤ 30 rows: "
            "exports.fast, more: exports.bulk)")
    with publisher_loop():
        rows = wait_done([j for j, *_ in jobs], 25)
    for job, size, queue, _ in jobs:
        row = rows[job]
        assert row and row["status"] == "succeeded", t(
            f"{size} 个商品的任务没有完成（{row and row['status']}）：{stuck_reason(job)}",
            f"the {size}-product job did not complete ({row and row['status']}): {stuck_reason(job)}")
    lines_zh, lines_en = [], []
    for job, size, queue, _ in jobs:
        seen = starts(job)
        expected = queue.split(".")[1] + "@"
        nodes = sorted({str(e.get("node")) for e in seen})
        lines_zh.append(f"{size} 行 → {', '.join(nodes)}（{', '.join(sorted({str(e.get('queue')) for e in seen}))}）")
        lines_en.append(f"{size} rows → {', '.join(nodes)} ({', '.join(sorted({str(e.get('queue')) for e in seen}))})")
        assert seen, t(f"{size} 个商品的任务完成了，却没有记录到任何 worker 执行", f"the {size}-product job completed "
                       "but no worker delivery was recorded")
        wrong = [e for e in seen if not str(e.get("node")).startswith(expected) or e.get("queue") != queue]
        assert not wrong, t(f"{size} 个商品的任务被 {wrong[0].get('node')} 从 {wrong[0].get('queue')} 消费，应只由 "
                            f"{expected}… 从 {queue} 消费",
                            f"the {size}-product job was consumed by {wrong[0].get('node')} from "
                            f"{wrong[0].get('queue')}; "
                            f"only {expected}… from {queue} may consume it")
    c.note(t("执行者：" + "；".join(lines_zh), "consumed by: " + "; ".join(lines_en)))
    c.note(t(f"两个 worker 各 concurrency=1、prefetch 1（pid {procs['fast'].pid} / {procs['bulk'].pid}）",
             f"two workers, concurrency=1 and prefetch 1 each (pid {procs['fast'].pid} / {procs['bulk'].pid})"))


# ---------------------------------------------------------------- 13.3

def check_http_503(c) -> None:
    state_store = store()
    limit = configured_limit(state_store)
    app, how = http_app()
    reset()
    add_filler(limit - 1, running=max(0, (limit - 1) // 4), with_events=(limit - 1) // 2)
    with serve(app) as client:
        c.note(t(f"HTTP 提交：{how}；容量 L={limit}，已有 {limit - 1} 行", f"HTTP submit: {how}; limit L={limit}, "
                 f"{limit - 1} rows present"))
        first = client.post("/exports", json={"product_ids": [4]})
        body = body_of(first)
        c.note(t(f"剩 1 个位置：POST /exports → {first.status_code} {str(body)[:120]}",
                 f"one place left: POST /exports → {first.status_code} {str(body)[:120]}"))
        assert first.status_code == 202, t(f"容量未满时应返回 202，实际 {first.status_code}",
                                           f"below capacity the answer must be 202, got {first.status_code}")
        job_id = body.get("job_id") if isinstance(body, dict) else None
        assert job_id and job_row(str(job_id)) and event_of(str(job_id)), t(
            "202 的响应里要有 job_id，且这个任务行和它的 outbox 事件都已存在",
            "the 202 answer must carry a job_id whose job row and outbox event both exist")

        before = counts()
        full = client.post("/exports", json={"product_ids": [5]})
        after = counts()
        full_body = body_of(full)
        c.note(t(f"已满（queued+running={active_count()}）：POST /exports → {full.status_code}，"
                 f"Retry-After: {full.headers.get('retry-after')}，{str(full_body)[:120]}",
                 f"full (queued+running={active_count()}): POST /exports → {full.status_code}, "
                 f"Retry-After: {full.headers.get('retry-after')}, {str(full_body)[:120]}"))
        c.note(t(f"任务 {before[0]} → {after[0]}，事件 {before[1]} → {after[1]}",
                 f"jobs {before[0]} → {after[0]}, events {before[1]} → {after[1]}"))
        assert full.status_code == 503, t(
            f"容量已满应返回 503，实际 {full.status_code}：整个服务暂满用 503（429 留给单个用户的配额）",
            f"at capacity the answer must be 503, got {full.status_code}: a full service is 503 (429 is for one "
            "user's quota)")
        assert full.headers.get("retry-after") == "5", t(
            f"503 要带 Retry-After: 5，实际 {full.headers.get('retry-after')!r}",
            f"the 503 must carry Retry-After: 5, got {full.headers.get('retry-after')!r}")
        assert not (isinstance(full_body, dict) and full_body.get("job_id")), t(
            "503 的响应里不能有 job_id", "a 503 answer must not carry a job_id")
        assert after == before, t("503 之后仍多出了任务或事件行：容量检查要在 INSERT 之前、同一事务里",
                                  "the 503 still left a job or event row behind: check capacity before the INSERTs, "
                                  "in the same transaction")
    reset()


# ---------------------------------------------------------------- 13.4

def backlog() -> tuple[dict, dict]:
    jobs = {r["status"]: (int(r["jobs"]), float(r["oldest_age_seconds"])) for r in sql(BACKLOG_JOBS)}
    outbox = {r["queue_name"]: (int(r["unpublished"]), float(r["oldest_unpublished_seconds"]))
              for r in sql(BACKLOG_OUTBOX)}
    return jobs, outbox


def show(jobs: dict) -> str:
    return ", ".join(f"{status} {n} (oldest {age:.1f}s)" for status, (n, age) in sorted(jobs.items())) or "empty"


def show_zh(jobs: dict) -> str:
    return "，".join(f"{status} {n} 个（最老 {age:.1f} 秒）" for status, (n, age) in sorted(jobs.items())) or "空"


def check_backlog(c) -> None:
    state_store = store()
    _import("publisher", ("claim_event", "publish_one"))
    limit = configured_limit(state_store)
    assert limit >= 4, t(f"配置的容量 {limit} 太小，本项需要至少 4", f"the configured limit {limit} is too small for "
                         "this item (at least 4)")
    short_jobs = min(6, limit - 2)  # the leftover and the long job take a place each
    reset()
    procs = workers()
    leftover = add_filler(1, running=1, age_seconds=3600)[0]
    pause(procs, signal.SIGSTOP)
    try:
        jobs = [submit_quietly(state_store, [k]) for k in range(11, 11 + short_jobs)]
        jobs.append(submit_quietly(state_store, list(range(1, 41))))
        ages = [70 - 10 * k for k in range(short_jobs)] + [10]
        with kit_db() as cur:
            for job, age in zip(jobs, ages):
                cur.execute("UPDATE export_jobs SET created_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE id=%s",
                            (age, job))
                cur.execute("UPDATE export_outbox SET created_at=DATE_SUB(NOW(6), INTERVAL %s SECOND) WHERE job_id=%s",
                            (age, job))
        before_jobs, before_outbox = backlog()
        c.note(t(f"worker 已暂停（SIGSTOP）；提交 {short_jobs} 个短任务和 1 个长任务，created_at 用 UPDATE 拨到 "
                 f"{ages[0]}…10 秒前；另有 1 个 1 小时前遗留的 running",
                 f"workers paused (SIGSTOP); {short_jobs} short and 1 long job submitted, created_at moved "
                 f"{ages[0]}…10 s back by UPDATE; plus one running row left over from an hour ago"))
        c.note(t(f"积压（暂停中）：{show_zh(before_jobs)}；未发布：{show_zh(before_outbox)}",
                 f"backlog (paused): {show(before_jobs)}; unpublished: {show(before_outbox)}"))
        assert before_jobs.get("queued", (0, 0))[0] == len(jobs), t(
            f"暂停时应有 {len(jobs)} 个 queued，实际 {before_jobs.get('queued', (0, 0))[0]}",
            f"{len(jobs)} jobs should be queued while paused, found {before_jobs.get('queued', (0, 0))[0]}")
        with publisher_loop():
            start_age = backlog()[0]["queued"][1]
            pause(procs, signal.SIGCONT)
            samples = []

            def settled():
                # Stop at the first sign either way: the oldest age fell while jobs still wait, or none waits.
                queued = backlog()[0].get("queued", (0, 0.0))
                samples.append(queued)
                return queued[0] == 0 or queued[1] <= start_age - 5

            with contextlib.suppress(WaitTimeout):
                wait_until(settled, 15, "the queued backlog to move", interval=0.02)
            dropped = next((q for q in samples if q[0] >= 1 and q[1] <= start_age - 5), None)
            rows = wait_done(jobs, 20)
        after_jobs, after_outbox = backlog()
        c.note(t(f"恢复 worker 和 publisher：queued 最老等待 {start_age:.1f} 秒"
                 + (f" → 还有 {dropped[0]} 个在等时降到 {dropped[1]:.1f} 秒" if dropped else " → 没有在积压未清空前下降"),
                 f"workers and publisher resumed: oldest queued age {start_age:.1f}s"
                 + (f" → {dropped[1]:.1f}s while {dropped[0]} still wait" if dropped else
                    " → never fell while jobs were still waiting")))
        c.note(t(f"排空后：{show_zh(after_jobs)}；未发布：{show_zh(after_outbox)}",
                 f"drained: {show(after_jobs)}; unpublished: {show(after_outbox)}"))
        unfinished = [j for j in jobs if not rows[j] or rows[j]["status"] != "succeeded"]
        assert not unfinished, t(f"恢复后仍有 {len(unfinished)} 个任务没有完成：{stuck_reason(unfinished[0])}",
                                 f"{len(unfinished)} jobs did not complete after the resume: "
                                 f"{stuck_reason(unfinished[0])}")
        assert dropped, t(
            "积压清空前，queued 的最老等待一直没有下降：最老的任务最后才被处理。publisher 要按 ORDER BY created_at, id "
            "先发最老的事件",
            "the oldest queued age never fell while jobs still waited: the oldest job was served last. The publisher "
            "must send the oldest event first (ORDER BY created_at, id)")
        assert after_jobs.get("running", (0, 0))[0] == 1 and after_jobs["running"][1] >= 3500, t(
            "遗留的 running 行应仍在 running 组里（它也占容量）", "the leftover running row should still show in the "
            "running group (it holds capacity too)")
        assert job_row(leftover)["status"] == "running"
    finally:
        pause(procs, signal.SIGCONT)
        reset()


# ---------------------------------------------------------------- 13.5

def check_fast_isolated(c) -> None:
    state_store = store()
    _import("publisher", ("claim_event", "publish_one"))
    reset()
    procs = workers()
    bulk_jobs = [submit_quietly(state_store, list(range(1, 41))), submit_quietly(state_store, list(range(1, 51)))]
    HOLD_LIST.write_text("\n".join(bulk_jobs) + "\n")
    try:
        with publisher_loop():
            try:
                wait_until(lambda: held(bulk_jobs[0]), 20, "the bulk worker to start the first long job", interval=0.05)
            except WaitTimeout:
                raise AssertionError(t(f"bulk worker 20 秒内没有开始第一个长任务：{stuck_reason(bulk_jobs[0])}",
                                       f"the bulk worker did not start the first long job within 20 s: "
                                       f"{stuck_reason(bulk_jobs[0])}")) from None
            second = job_row(bulk_jobs[1])["status"]
            c.note(t(f"2 个长任务（40、50 行）：bulk@ 正在执行第 1 个（被按住在写文件），第 2 个 {second}",
                     f"2 long jobs (40, 50 rows): bulk@ runs the first (held while writing), the second is {second}"))
            started = time.monotonic()
            fast = submit_quietly(state_store, [7])
            row = wait_done([fast], 6)[fast]
            took = time.monotonic() - started
            still_held = not released(bulk_jobs[0])
            seen = starts(fast)
            c.note(t(f"此时提交 1 行的短任务 → {row and row['status']}，用时 {took:.1f} 秒，执行者 "
                     f"{', '.join(str(e.get('node')) for e in seen) or '无'}；长任务仍在执行：{still_held}",
                     f"a 1-row job submitted now → {row and row['status']} in {took:.1f}s, run by "
                     f"{', '.join(str(e.get('node')) for e in seen) or 'nobody'}; the long job still running: "
                     f"{still_held}"))
            assert row and row["status"] == "succeeded", t(
                f"bulk worker 忙时短任务 6 秒内没有完成：{stuck_reason(fast)}",
                f"the short job did not complete within 6 s while the bulk worker was busy: {stuck_reason(fast)}")
            assert still_held, t("短任务完成前长任务已经结束，无法证明隔离", "the long job ended before the short one "
                                 "completed: isolation not shown")
            assert seen and all(str(e.get("node")).startswith("fast@") for e in seen), t(
                "短任务应由 fast@ worker 执行", "the short job must be run by the fast@ worker")
            for job in bulk_jobs:
                (LOG_DIR / f"lab13-release-{job}").write_text("go")
            rows = wait_done(bulk_jobs, 20)
            c.note(t(f"放开后长任务：{', '.join(str(r and r['status']) for r in rows.values())}",
                     f"released, the long jobs: {', '.join(str(r and r['status']) for r in rows.values())}"))
    finally:
        for job in bulk_jobs:
            (LOG_DIR / f"lab13-release-{job}").write_text("go")
        reset()


# ---------------------------------------------------------------- 13.6

def tool(args: list[str], env: dict) -> dict:
    done = run_python([TOOLS, *args], cwd=WORK, timeout=30, env=env)
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, t(f"检查器的辅助进程失败：{redact(done.stdout)[-300:]}",
                                             f"the checker's helper failed: {redact(done.stdout)[-300:]}")
    return json.loads(lines[-1])


def check_exercise(c) -> None:
    store()
    env5 = dict(os.environ, EXPORT_ADMISSION_LIMIT="5")
    default = tool(["limit"], env5).get("default")
    reset()
    producers = Producers(["A", "B"], env=env5)
    try:
        fill_round = producers.go(4, [6])
        fill = classify(producers.results(fill_round, 20))
        active = active_count()
        c.note(t(f"EXPORT_ADMISSION_LIMIT=5：admit_export 的默认 limit = {default!r}；两个 producer 从 0 开始各提交 4 次 → "
                 f"{outcome_zh(fill)}；queued+running = {active}",
                 f"EXPORT_ADMISSION_LIMIT=5: admit_export's default limit = {default!r}; two producers from empty, "
                 f"4 submits each → {outcome_text(fill)}; queued+running = {active}"))
        assert_no_errors(fill)
        if default != 5 and fill["capacity"] == 0 and fill["lock_wait"] == 0:
            c.skip(t("容量仍高于 5（没有任何提交被拒绝）：练习未做。把 admit_export 的默认 limit 改为 5，或按指南读取 "
                     "EXPORT_ADMISSION_LIMIT", "the limit is still above 5 (no submit was refused): exercise not "
                     "attempted. Set admit_export's default limit to 5, or read EXPORT_ADMISSION_LIMIT as the guide "
                     "shows"))
        assert default == 5, t(
            f"提交路径在 5 处拒绝了，但 admit_export 的默认 limit 是 {default!r}：周期创建和重放（第 14、15 课）调用 "
            "admit_export(cur)，会照旧受理。上限只定义一处，作为 admit_export 的默认值",
            f"the submit path refused at 5 but admit_export's default limit is {default!r}: schedules and replays "
            "(lessons 14, 15) call admit_export(cur) and would keep admitting. Define the limit once, as "
            "admit_export's default")
        assert active <= 5, t(f"两个 producer 让 queued+running 达到 {active}，超过 admit_export 默认值所说的 5："
                              "计数要和 limit 参数比较，而且在共享的数据库里数，而不是每个进程各数各的",
                              f"two producers pushed queued+running to {active}, past the 5 that admit_export's "
                              "default "
                              "says: compare the count with the limit parameter, counted in the shared database "
                              "(not per process)")
        assert len(fill["ok"]) == 5, t(f"从 0 开始应恰好受理 5 个，实际 {len(fill['ok'])} 个",
                                       f"from empty exactly 5 submits must be admitted, got {len(fill['ok'])}")

        direct = tool(["admit"], env5)
        c.note(t(f"满 5 个时直接调用 admit_export(cur)（周期创建/重放的方式）→ {'拒绝' if 'capacity' in direct else direct}",
                 f"at 5, admit_export(cur) called directly (as schedules and replays do) → "
                 f"{'refused' if 'capacity' in direct else direct}"))
        assert "capacity" in direct, t(f"满 5 个时 admit_export(cur) 没有抛 CapacityExceeded：{direct}",
                                       f"at 5 admit_export(cur) did not raise CapacityExceeded: {direct}")
        before = counts()
        script = run_python(["submit_db_export.py"], cwd=WORK, timeout=30, env=env5)
        after = counts()
        c.note(t(f"满 5 个时 python submit_db_export.py → 退出码 {script.returncode}，任务 {before[0]} → {after[0]}",
                 f"at 5, python submit_db_export.py → exit {script.returncode}, jobs {before[0]} → {after[0]}"))
        assert script.returncode != 0 and after == before, t(
            "满 5 个时 submit_db_export.py 仍受理了任务：它必须经过同一个 admit_export",
            "at 5 submit_db_export.py still admitted a job: it must go through the same admit_export")
        app, how = http_app()
        with serve(app, env=env5) as client:
            full = client.post("/exports", json={"product_ids": [8]})
            finished = sql("SELECT id FROM export_jobs WHERE status='queued' ORDER BY created_at LIMIT 1")[0]["id"]
            sql("UPDATE export_jobs SET status='succeeded', updated_at=NOW(6) WHERE id=%s", (finished,))
            freed = client.post("/exports", json={"product_ids": [8]})
            again = client.post("/exports", json={"product_ids": [8]})
        c.note(t(f"HTTP（{how}）：满 5 个 → {full.status_code}；完成 1 个后 → {freed.status_code}；再提交 → {again.status_code}",
                 f"HTTP ({how}): at 5 → {full.status_code}; after one finished → {freed.status_code}; once more → "
                 f"{again.status_code}"))
        assert (full.status_code, freed.status_code, again.status_code) == (503, 202, 503), t(
            "HTTP 提交应使用同一个上限 5：满时 503，空出 1 个位置后 202，再满时 503",
            "the HTTP submit must use the same limit 5: 503 when full, 202 once a place is free, 503 when full again")

        race = race_at_edge(c, producers, 5, running=1, bare=1)
        c.note(t(f"边界：已有 4 行（1 个 running），两个 producer 同时提交 → {outcome_zh(race)}；queued+running = "
                 f"{race['active']}",
                 f"at the edge: 4 rows (1 running), two producers at once → {outcome_text(race)}; queued+running = "
                 f"{race['active']}"))
        assert race["active"] <= 5, t(f"两个 producer 同时提交让 queued+running 达到 {race['active']}，超过 5：计数前先锁门闩行",
                                      f"two producers at once pushed queued+running to {race['active']}, past 5: lock "
                                      "the gate row before counting")
        assert_no_errors(race)
        assert len(race["ok"]) == 1, t(f"剩 1 个位置时应恰好受理 1 个，实际 {len(race['ok'])}",
                                       f"with one place left exactly 1 must be admitted, got {len(race['ok'])}")
    finally:
        producers.stop()
        reset()


# ---------------------------------------------------------------- main

def main(tap) -> None:
    EVENTS.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tap.check("13.1") as c:
            c.skip_unless_selected()
            check_concurrent_limit(c)
        with tap.check("13.2") as c:
            c.skip_unless_selected()
            check_routing(c)
        with tap.check("13.3") as c:
            c.skip_unless_selected()
            check_http_503(c)
        with tap.check("13.4") as c:
            c.skip_unless_selected()
            check_backlog(c)
        with tap.check("13.5") as c:
            c.skip_unless_selected()
            check_fast_isolated(c)
        with tap.check("13.6") as c:
            c.skip_unless_selected()
            check_exercise(c)
    finally:
        for proc in _WORKERS.values():
            proc.stop(grace=10)


if __name__ == "__main__":
    from shared.tap import main_guard
    main_guard(main)
