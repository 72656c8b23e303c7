"""The soak (a kit script, not a lesson file): many jobs through the whole durable path under chaos,
then a ledger that accounts for every acknowledged submit.

    python -m checks soak [--long] [--seed N]        (make soak; make test runs the short form)

What runs, all real processes started and stopped by PID:
  - two Celery workers (fast@ and bulk@, concurrency 2) on the learner's app, via checks/tools/soak_worker.py
    (it records each delivery and holds each lease a moment, so kills land on work in flight);
  - two publishers (`publisher.py --loop`) and a recovery loop (recovery.recover_batch);
  - a producer submitting --jobs exports through submit_snapshot (a submit counts as acknowledged
    only when it returned a job id; CapacityExceeded and connection errors are retried);
  - a chaos loop with a printed seed: SIGKILL a pool child, SIGKILL a whole worker (then start it
    again, as a supervisor would), restart Redis once and the database server once.

Then it drains: when nothing has finished for a moment, the leases, backoffs and dispatch times that
stand between the remaining jobs and recovery are moved into the past (never waited out).  The drain
ends when every job is terminal, or when no job has finished for --stall-seconds although the timers
were moved again and again: a job that no recovery path moves any more is lost, however slow the
machine (a slow machine still makes progress, so it is never cut off by a total time).  The ledger:
lost (acknowledged but missing or not terminal) must be 0; every succeeded job's one result_ref must
be a file whose JSON equals its payload; duplicates (deliveries beyond one per job) are counted and
reported, not hidden.  Exit 0 only when lost = 0 and every artifact matches.
"""

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pymysql

from shared import servicectl
from shared.events import read_events
from shared.proc import children_of
from shared.logs import LOG_DIR
from shared.lesson_db import kit_db
from shared.lesson_db import sql as rows
from shared.proc import Process

WORK = Path.cwd()
DELIVERIES = LOG_DIR / "soak-deliveries.jsonl"
TERMINAL = ("succeeded", "failed", "cancelled")


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------- processes

class Fleet:
    """The long-running processes, each restartable: a stand-in for a supervisor."""

    def __init__(self, delay: float):
        self.env = dict(os.environ, TASKLAB_LOG_DIR=str(LOG_DIR), SOAK_TASK_DELAY=str(delay))
        self.specs = {
            "fast": [sys.executable, "-m", "celery", "-A", "checks.tools.soak_worker:app", "worker", "-l", "INFO",
                     "-Q", "exports.fast", "--concurrency=2", "-n", "soakfast@%h",
                     "--without-mingle", "--without-gossip"],
            "bulk": [sys.executable, "-m", "celery", "-A", "checks.tools.soak_worker:app", "worker", "-l", "INFO",
                     "-Q", "exports.bulk", "--concurrency=2", "-n", "soakbulk@%h",
                     "--without-mingle", "--without-gossip"],
            "publisher-1": [sys.executable, "publisher.py", "--loop"],
            "publisher-2": [sys.executable, "publisher.py", "--loop"],
        }
        self.procs: dict[str, Process] = {}
        self.restarts = 0

    def start(self, name: str) -> None:
        proc = Process(self.specs[name], cwd=WORK, log_path=LOG_DIR / f"soak-{name}.log", env=self.env)
        self.procs[name] = proc

    def start_all(self) -> None:
        for name in self.specs:
            self.start(name)
        for name in ("fast", "bulk"):
            self.procs[name].wait_ready(120, log_contains=" ready.")

    def workers(self) -> list[str]:
        return ["fast", "bulk"]

    def supervise(self) -> None:
        """Start again whatever died (a killed worker; a publisher that gave up)."""
        for name, proc in list(self.procs.items()):
            if not proc.alive():
                proc.stop()
                self.start(name)
                self.restarts += 1
                log(f"supervisor: started {name} again")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop(grace=10)


# --------------------------------------------------------------------------------- database

# The soak's own look at the database goes through the kit's connection (shared.lesson_db), never the
# learner's code: the ledger must not depend on what it is auditing.

def product_ids() -> list[int]:
    return [r["id"] for r in rows("SELECT id FROM products ORDER BY id")]


# --------------------------------------------------------------------------------- the three loops

class Producer(threading.Thread):
    def __init__(self, jobs: int, seconds: float, ids: list[int], rng: random.Random):
        super().__init__(daemon=True)
        self.jobs, self.seconds, self.ids, self.rng = jobs, seconds, ids, rng
        self.acknowledged: list[str] = []
        self.rejected = 0       # CapacityExceeded: not acknowledged, tried again
        self.errors: dict[str, int] = {}
        self.stopping = threading.Event()

    def choose(self) -> list[int]:
        # Mostly short exports (exports.fast), one in five long (exports.bulk).
        size = self.rng.randint(31, 45) if self.rng.random() < 0.2 else self.rng.randint(1, 8)
        return self.rng.sample(self.ids, min(size, len(self.ids)))

    def run(self) -> None:
        import state_store
        pace = self.seconds / self.jobs
        while len(self.acknowledged) < self.jobs and not self.stopping.is_set():
            ids = self.choose()
            while not self.stopping.is_set():
                try:
                    self.acknowledged.append(state_store.submit_snapshot(ids))
                    break
                except state_store.CapacityExceeded:
                    self.rejected += 1
                    time.sleep(0.1)
                except Exception as exc:  # the database is restarting: no job id, so not acknowledged
                    name = type(exc).__name__
                    self.errors[name] = self.errors.get(name, 0) + 1
                    time.sleep(0.2)
            time.sleep(pace)

    def wait(self, stall: float) -> None:
        """Until every job is acknowledged, or none was for `stall` seconds (then it is told to stop)."""
        seen, since = -1, time.monotonic()
        while self.is_alive():
            if len(self.acknowledged) != seen:
                seen, since = len(self.acknowledged), time.monotonic()
            elif time.monotonic() - since > stall:
                log(f"producer: no submit acknowledged for {stall:g} s; stopping it")
                break
            self.join(timeout=0.5)
        self.stopping.set()
        self.join(timeout=30)


class Recovery(threading.Thread):
    """recovery.recover_batch every 0.3 s, as a deployed scanner would; errors are counted, not fatal."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.recovered = 0
        self.errors = 0

    def run(self) -> None:
        import recovery
        while not self.stopping.is_set():
            try:
                self.recovered += recovery.recover_batch()
            except Exception:
                self.errors += 1
            self.stopping.wait(0.3)


def chaos(fleet: Fleet, rng: random.Random, seconds: float, kills: int) -> list[dict]:
    """Faults spread over `seconds`: `kills` process kills, one Redis restart, one database restart."""
    actions = ["kill_child"] * (kills - kills // 3) + ["kill_worker"] * (kills // 3)
    actions += ["restart_redis", "restart_mysql"]
    rng.shuffle(actions)
    events = []
    gap = seconds / (len(actions) + 1)
    for action in actions:
        time.sleep(gap)
        fleet.supervise()
        at = time.time()
        if action in ("kill_child", "kill_worker"):
            name = rng.choice(fleet.workers())
            proc = fleet.procs[name]
            if action == "kill_child":
                children = children_of(proc.pid)
                if not children:
                    events.append({"at": at, "action": action, "target": name, "done": False})
                    continue
                pid = rng.choice(children)
                os.kill(pid, signal.SIGKILL)
                target = f"{name} pool child {pid}"
            else:
                target = f"{name} worker {proc.pid} (whole group)"
                proc.kill()
                fleet.start(name)
                fleet.restarts += 1
        else:
            service = "redis" if action == "restart_redis" else "mysql"
            how = servicectl.stop_service(service)
            time.sleep(0.5)  # a real outage, however short: clients see refused connections
            servicectl.up([service])
            target = how
        events.append({"at": at, "action": action, "target": target, "done": True,
                       "seconds": round(time.time() - at, 2)})
        log(f"chaos: {action} {target}")
    return events


# --------------------------------------------------------------------------------- drain

def job_rows(job_ids: list[str], columns: str) -> dict[str, dict]:
    """The export_jobs rows of these ids (in chunks of 200: one IN list per query stays small)."""
    found = {}
    for start in range(0, len(job_ids), 200):
        chunk = job_ids[start:start + 200]
        marks = ",".join(["%s"] * len(chunk))
        for r in rows(f"SELECT id, {columns} FROM export_jobs WHERE id IN ({marks})", chunk):
            found[r["id"]] = r
    return found


def statuses(job_ids: list[str]) -> dict[str, str]:
    return {job_id: r["status"] for job_id, r in job_rows(job_ids, "status").items()}


def move_timers_into_the_past() -> int:
    """What recovery would wait for, moved into the past instead of waited out (for stuck jobs only):
    expired leases (30 s), the 10 s backoff, and the 60 s 'sent but never claimed' threshold."""
    changed = 0
    with kit_db() as cur:
        def move(statement: str) -> int:
            # Autocommitted, one statement each.  A deadlock (1213) or lock wait (1205) with the workers
            # rolls back only this statement: it moved nothing now, and the drain's next pass moves it.
            try:
                cur.execute(statement)
                return cur.rowcount
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in (1205, 1213):
                    return 0
                raise

        changed += move("""UPDATE export_jobs SET lease_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND)
                       WHERE status='running' AND lease_until>=NOW(6)""")
        changed += move("""UPDATE export_jobs SET next_attempt_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND)
                       WHERE status='queued' AND next_attempt_at>NOW(6)""")
        changed += move("""UPDATE export_outbox SET available_at=DATE_SUB(NOW(6), INTERVAL 1 SECOND)
                       WHERE sent_at IS NULL AND available_at>NOW(6)""")
        changed += move("""UPDATE export_outbox SET claim_until=DATE_SUB(NOW(6), INTERVAL 1 SECOND)
                       WHERE sent_at IS NULL AND claim_until>=NOW(6)""")
        # Queued, announced, never claimed (its message died with a broker restart, say): make its
        # last dispatch look 61 s old, past the scanner's 60 s threshold.
        changed += move("""UPDATE export_outbox SET sent_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND)
                       WHERE sent_at>DATE_SUB(NOW(6), INTERVAL 61 SECOND) AND job_id IN (
                         SELECT id FROM export_jobs WHERE status='queued')""")
        changed += move("""UPDATE export_jobs AS j SET
                         j.last_dispatched_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND),
                         j.next_attempt_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND),
                         j.updated_at=DATE_SUB(NOW(6), INTERVAL 61 SECOND)
                       WHERE j.status='queued' AND NOT EXISTS (
                         SELECT 1 FROM export_outbox AS o WHERE o.job_id=j.id AND o.sent_at IS NULL)""")
    return changed


def drain(job_ids: list[str], fleet: Fleet, stall: float) -> dict:
    """Until every job is terminal, or none has finished for `stall` seconds of moved timers."""
    started = time.monotonic()
    shifts, last_done = 0, -1
    last_progress = last_change = time.monotonic()
    while True:
        fleet.supervise()
        try:
            found = statuses(job_ids)
        except Exception:  # the database is still coming back from its restart
            time.sleep(0.5)
            continue
        done = sum(1 for s in found.values() if s in TERMINAL)
        if done == len(job_ids):
            break
        now = time.monotonic()
        if done != last_done:
            last_done, last_progress, last_change = done, now, now
        elif now - last_progress > stall:
            log(f"drain: no job finished for {stall:g} s although the timers were moved {shifts} times")
            break
        elif now - last_change > 2.0:
            changed = move_timers_into_the_past()
            shifts += 1
            last_change = now
            log(f"drain: {len(job_ids) - done} jobs waiting on timers; moved {changed} into the past")
        time.sleep(0.3)
    return {"seconds": round(time.monotonic() - started, 1), "timer_shifts": shifts}


# --------------------------------------------------------------------------------- the ledger

def ledger(acknowledged: list[str]) -> dict:
    found = job_rows(acknowledged, "status, attempts, payload, result_ref")
    deliveries: dict[str, int] = {}
    for event in read_events(DELIVERIES):
        if event.get("kind") != "start":
            continue
        job_id = event.get("job_id")
        deliveries[job_id] = deliveries.get(job_id, 0) + 1
    missing = [j for j in acknowledged if j not in found]
    not_terminal = [j for j, r in found.items() if r["status"] not in TERMINAL]
    by_status: dict[str, int] = {}
    bad_artifacts = []
    for job_id, r in found.items():
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        if r["status"] != "succeeded":
            if r["result_ref"] is not None:
                bad_artifacts.append({"job_id": job_id, "why": f"{r['status']} job has a result_ref"})
            continue
        path = WORK / (r["result_ref"] or "")
        try:
            ok = r["result_ref"] and json.loads(path.read_text(encoding="utf-8")) == json.loads(r["payload"])
        except (OSError, ValueError):
            ok = False
        if not ok:
            bad_artifacts.append({"job_id": job_id, "why": "result file missing or not equal to the payload"})
    # Every executed task is a delivery; more than one per job is a duplicate (harmless, but counted).
    total = sum(deliveries.get(j, 0) for j in acknowledged)
    duplicates = sum(max(0, deliveries.get(j, 0) - 1) for j in acknowledged)
    extra_rows = rows("SELECT COUNT(*) AS n FROM export_jobs")[0]["n"] - len(found)
    return {
        "acknowledged": len(acknowledged),
        "lost": len(missing) + len(not_terminal),
        "missing_rows": missing[:10],
        "not_terminal": not_terminal[:10],
        "by_status": by_status,
        "artifact_mismatches": bad_artifacts[:10],
        "artifact_mismatch_count": len(bad_artifacts),
        "deliveries": total,
        "duplicate_deliveries": duplicates,
        "jobs_delivered_more_than_once": sum(1 for j in acknowledged if deliveries.get(j, 0) > 1),
        "max_attempts_seen": max((r["attempts"] for r in found.values()), default=0),
        "unacknowledged_rows": extra_rows,  # a submit whose commit outcome the producer never learned
    }


def print_table(record: dict) -> None:
    tally = record["ledger"]
    lines = [
        ("seed", record["seed"]),
        ("jobs acknowledged", tally["acknowledged"]),
        ("lost (missing or not terminal)", tally["lost"]),
        ("by status", ", ".join(f"{k} {v}" for k, v in sorted(tally["by_status"].items()))),
        ("artifact mismatches", tally["artifact_mismatch_count"]),
        ("deliveries", tally["deliveries"]),
        ("duplicate deliveries",
         f"{tally['duplicate_deliveries']} (over {tally['jobs_delivered_more_than_once']} jobs)"),
        ("max attempts on one job", tally["max_attempts_seen"]),
        ("rows nobody was told about", tally["unacknowledged_rows"]),
        ("capacity rejections retried", record["producer"]["capacity_rejections"]),
        ("submit errors retried", sum(record["producer"]["errors"].values())),
        ("chaos events", ", ".join(e["action"] for e in record["chaos"] if e["done"])),
        ("process restarts", record["restarts"]),
        ("jobs recovered by the scanner", record["recovery"]["recovered"]),
        ("drain", f"{record['drain']['seconds']} s, {record['drain']['timer_shifts']} timer shifts"),
        ("total", f"{record['seconds']} s"),
    ]
    width = max(len(k) for k, _ in lines)
    print("\n| " + "item".ljust(width) + " | value |\n|" + "-" * (width + 2) + "|-------|")
    for key, value in lines:
        print(f"| {key.ljust(width)} | {value} |")
    print("\nSOAK " + ("PASS" if record["pass"] else "FAIL"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=LOG_DIR / "soak-ledger.json")
    # Kit tests: --calm skips the chaos (no server restarts); --stall-seconds: how long the drain goes on
    # with no job finishing (timers moved meanwhile) before the rest count as lost.
    parser.add_argument("--calm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stall-seconds", type=float, default=90.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    rng = random.Random(seed)
    log(f"seed {seed} (repeat this chaos with --seed {seed}); {args.jobs} jobs")
    started = time.monotonic()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    DELIVERIES.unlink(missing_ok=True)
    # ~12 jobs/s: slow enough that the chaos window sees work in flight, fast enough to stay short.
    window = max(8.0, args.jobs / 12) if not args.calm else args.jobs / 12
    fleet = Fleet(delay=0.15)
    recovery_loop = Recovery()
    try:
        fleet.start_all()
        producer = Producer(args.jobs, window, product_ids(), rng)
        producer.start()
        recovery_loop.start()
        events = [] if args.calm else chaos(fleet, rng, window, kills=max(4, args.jobs // 25))
        producer.wait(stall=args.stall_seconds)
        log(f"producer done: {len(producer.acknowledged)} acknowledged")
        drained = drain(producer.acknowledged, fleet, stall=args.stall_seconds)
        recovery_loop.stopping.set()
        recovery_loop.join(timeout=10)
        record = {
            "seed": seed,
            "jobs_requested": args.jobs,
            "producer": {"capacity_rejections": producer.rejected, "errors": producer.errors},
            "chaos": events,
            "restarts": fleet.restarts,
            "recovery": {"recovered": recovery_loop.recovered, "errors": recovery_loop.errors},
            "drain": drained,
            "ledger": ledger(producer.acknowledged),
        }
    finally:
        recovery_loop.stopping.set()
        fleet.stop_all()
    record["seconds"] = round(time.monotonic() - started, 1)
    tally = record["ledger"]
    record["pass"] = (tally["lost"] == 0 and tally["artifact_mismatch_count"] == 0
                      and tally["acknowledged"] == args.jobs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print_table(record)
    return 0 if record["pass"] else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the fleet on the way out
    raise SystemExit(main())
