"""The distributed-grading drill: a class graded by three stand-in machines while things go wrong.

    python -m checks.grade_drill [--short] [--out FILE.json] [--keep]

It starts a private Redis (its own folder, a free port, a generated password, append-only file so a
restart keeps the queue) and three grading workers as separate processes (three machines, one folder at
a time each), makes a class from the kit's reference files (every third folder broken: POST answers 200
instead of 202, so 01.1 fails), and grades it through checks.distributed.  Meanwhile, each step set off
by what the store says, never by a sleep:

  1. a pool child is SIGKILLed mid-grade (the first execution that has started and not stored a result);
  2. the broker is stopped (by its PID) and started again on the same port and folder, with work queued;
  3. another worker gets TERM (warm shutdown: it finishes its folder first);
  4. (full drill only) a whole worker dies — SIGKILL to its process group, a machine losing power — and
     its folder comes back through lesson 09's visibility timeout and unacked-restore sweep.

A supervisor loop starts a replacement for every worker that exits.  The ledger at the end: every folder
has one key and one stored result, none lost, duplicates (deliveries beyond one per key) counted, and
every check's status equal to a local `python -m checks grade -j 1` of the same folders.
Exit 0 only when nothing was lost and the verdicts match.  Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from checks import grading_worker as W
from checks.drill_machines import DRILL_VISIBILITY, Broker, DrillError, Grader, lab_env, make_class, parent_of, wait_for
from checks.grade import student_names
from checks.grade_remote import submit_and_collect
from checks.packing import pack_folder
from shared.i18n import lang, t, t_in
from shared.manifest import KIT_ROOT

FULL = {"folders": 30, "lessons": ["01", "02", "03"], "machine_death": True, "timeout": 1800}
SHORT = {"folders": 6, "lessons": ["01"], "machine_death": False, "timeout": 420}


class Drill:
    def __init__(self, mode: dict, home: Path):
        import redis
        self.mode, self.home = mode, home
        self.broker = Broker(home)
        self.graders: list[Grader] = []
        self.events: list[dict] = []
        self.t0, self.wall0 = time.monotonic(), time.time()
        self.keys: set[str] = set()
        self.done_event = threading.Event()
        self.chaos_error: str | None = None
        self.client = redis.Redis.from_url(self.broker.url, socket_timeout=5, socket_connect_timeout=2)
        self.lock = threading.Lock()

    # -- facts from the store -------------------------------------------------------------------------
    def _safe(self, op, default):
        import redis
        try:
            return op()
        except redis.RedisError:  # the broker is restarting: no fact this time
            return default

    def done_count(self) -> int:
        def count():
            with self.client.pipeline() as pipe:
                for key in sorted(self.keys):
                    pipe.exists(W.RESULTS + key)
                return sum(pipe.execute())
        return self._safe(count, 0) if self.keys else 0

    def in_flight(self) -> list[dict]:
        """Executions that started and have not stored a result: [{key, host, pid}]."""
        found = []
        for key in sorted(self.keys):
            last = self._safe(lambda: self.client.lindex(W.DELIVERIES + key, -1), None)
            if last and not self._safe(lambda: self.client.exists(W.RESULTS + key), 1):
                found.append(dict(json.loads(last), key=key))
        return found

    def grader_of(self, host: str) -> Grader | None:
        return next((g for g in self.graders if host.split("@")[0] == g.name and g.alive()), None)

    def event(self, what: str, **facts) -> None:
        entry = {"at": round(time.monotonic() - self.t0, 1), "what": what, **facts}
        with self.lock:
            self.events.append(entry)
        print(f"  [drill +{entry['at']:.1f}s] {what} {json.dumps(facts, ensure_ascii=False)}",
              file=sys.stderr, flush=True)

    def all_done(self) -> bool:
        return self.done_event.is_set() or (bool(self.keys) and self.done_count() >= len(self.keys))

    # -- the steps ---------------------------------------------------------------------------------------
    def execution_under_way(self, what: str, limit: float, every: float, spare: str | None = None):
        """(run, its grader) of an execution in a pool child of a worker this drill started (not of the
        folder `spare`), "done" when every folder is graded already; polled, bounded."""
        def target():
            if self.all_done():
                return "done"
            for run in self.in_flight():
                g = self.grader_of(run["host"])
                if g and parent_of(run["pid"]) == g.pid and run["key"] != spare:
                    return run, g
            return None
        return wait_for(what, target, limit, every)

    def kill_pool_child(self) -> None:
        found = self.execution_under_way("an execution under way", 180, 0.05)
        if found == "done":
            self.event("skipped: SIGKILL a pool child", reason="every folder was graded already")
            return
        run, g = found
        mid = not self._safe(lambda: self.client.exists(W.RESULTS + run["key"]), 1)
        os.kill(run["pid"], signal.SIGKILL)
        self.killed_key, self.killed_worker = run["key"], g.name
        self.event("SIGKILL pool child", worker=g.name, pid=run["pid"], key=run["key"][:12], mid_grade=bool(mid))

    def restart_broker(self) -> None:
        wait_for("a first stored result", lambda: self.all_done() or self.done_count() >= 1, 300)
        if self.all_done():
            self.event("skipped: broker restart", reason="every folder was graded already")
            return
        queued = self._safe(lambda: self.client.llen(W.QUEUE), None)
        running = len(self.in_flight())
        done = self.done_count()
        stopped = time.monotonic()
        self.broker.stop()
        self.broker.start()
        self.done_before_restart = done
        self.event("broker restarted (TERM by PID, same port and folder)",
                   down_seconds=round(time.monotonic() - stopped, 2),
                   queued_before=queued, running_before=running, done_before=done,
                   queued_after=self._safe(lambda: self.client.llen(W.QUEUE), None))

    def term_worker(self) -> None:
        wait_for("a result stored after the restart",
                 lambda: self.all_done() or self.done_count() > getattr(self, "done_before_restart", 0), 300)
        if self.all_done():
            self.event("skipped: TERM a worker", reason="every folder was graded already")
            return
        busy = {r["host"].split("@")[0] for r in self.in_flight()}
        killed = getattr(self, "killed_worker", None)
        choices = [g for g in self.graders if g.alive() and g.name != killed]
        g = next((g for g in choices if g.name in busy), choices[0] if choices else None)
        if g is None:
            self.event("skipped: TERM a worker", reason="no worker alive")
            return
        g.proc.terminate()
        self.event("TERM (warm shutdown)", worker=g.name, pid=g.pid, busy=g.name in busy)
        try:
            g.proc.wait(timeout=DRILL_VISIBILITY)
            self.event("worker exited after TERM", worker=g.name, code=g.proc.returncode)
        except subprocess.TimeoutExpired:
            self.event("worker did not stop after TERM; SIGKILL", worker=g.name)
            g.kill_group()

    def machine_death(self) -> None:
        found = self.execution_under_way("an execution under way for a machine death", 300, 0.1,
                                         spare=getattr(self, "killed_key", None))
        if found == "done":
            self.event("skipped: machine death", reason="every folder was graded already")
            return
        run, g = found
        g.kill_group()  # the worker and its pool child at once; their boxes die with them (--die-with-parent)
        self.dead_key, self.dead_at = run["key"], time.monotonic()
        self.event("machine death: SIGKILL the worker's process group", worker=g.name, pid=g.pid,
                   key=run["key"][:12], expect_back_after=f"{DRILL_VISIBILITY}+{W.RESTORE_INTERVAL}s")
        # Nobody requeues for a dead machine: the others' sweep returns its folder once the visibility
        # timeout has passed; then it waits for a free worker.
        again = wait_for("the dead machine's folder handed out again",
                         lambda: self.done_event.is_set() or
                         self._safe(lambda: self.client.llen(W.DELIVERIES + run["key"]), 0) >= 2,
                         DRILL_VISIBILITY + 300, every=0.5)
        if self._safe(lambda: self.client.llen(W.DELIVERIES + run["key"]), 0) >= 2:
            self.event("the dead machine's folder started again", key=run["key"][:12],
                       after_seconds=round(time.monotonic() - self.dead_at, 1))
        elif again:
            self.event("the dead machine's folder was not needed again", reason="its result was stored before the kill")

    def chaos(self) -> None:
        try:
            self.kill_pool_child()
            self.restart_broker()
            self.term_worker()
            if self.mode["machine_death"]:
                self.machine_death()
        except DrillError as exc:
            self.chaos_error = str(exc)
            self.event("chaos step failed", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - reported in the ledger, the drill goes on
            self.chaos_error = f"{type(exc).__name__}: {exc}"
            self.event("chaos step failed", error=self.chaos_error)

    def supervise(self) -> None:
        """A supervisor's job: a worker that exited is replaced (bounded: at most five in a drill)."""
        for g in list(self.graders):
            if not g.alive() and not g.replaced and len(self.graders) < 8:
                g.replaced = True
                new = Grader(f"grader{len(self.graders) + 1}", self.broker.url, self.home)
                self.graders.append(new)
                self.event("supervisor started a replacement", worker=new.name, replaces=g.name,
                           exit_code=g.proc.returncode)

    def ready_workers(self, names: set[str]) -> bool:
        try:
            replies = W.app.control.ping(timeout=1.0)
        except Exception:  # noqa: BLE001 - not reachable yet
            return False
        up = {host.split("@")[0] for reply in replies for host in reply}
        for g in self.graders:
            if not g.alive() and g.name in names:
                raise DrillError(t("{name} failed to start, see {log}", name=g.name, log=g.log))
        return names <= up

    def stop_all(self) -> None:
        for g in self.graders:
            g.stop(limit=30)
        self.broker.stop()


def verdicts(path: Path) -> dict[str, str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {x["id"]: x["status"] for x in data["tests"]}


def ledger(drill: Drill, folders: list[Path], names: list[str], lesson_ids: list[str], dist_out: Path,
           local_out: Path) -> dict:
    keys = {}
    for name, folder in zip(names, folders, strict=True):
        keys[name] = W.grading_key(pack_folder(folder), lesson_ids, W.kit_version())
    rows, mismatches, per_worker = [], [], {}
    lost = duplicates = 0
    for name in names:
        key = keys[name]
        stored = drill.client.get(W.RESULTS + key)
        runs = [json.loads(x) for x in drill.client.lrange(W.DELIVERIES + key, 0, -1)]
        entry = json.loads(stored) if stored else None
        report = dist_out / f"{name}.json"
        if entry is None or not report.exists():
            lost += 1
        if entry:
            per_worker[entry["worker"]] = per_worker.get(entry["worker"], 0) + 1
        duplicates += max(0, len(runs) - 1)
        mine = verdicts(report) if report.exists() else {}
        local = verdicts(local_out / f"{name}.json") if (local_out / f"{name}.json").exists() else {}
        differ = sorted(c for c in set(mine) | set(local) if mine.get(c) != local.get(c))
        mismatches += [{"student": name, "check": c, "distributed": mine.get(c), "local": local.get(c)} for c in differ]
        rows.append({"student": name, "key": key, "stored": entry is not None, "deliveries": len(runs),
                     "hosts": [r["host"] for r in runs], "started_at": [round(r["at"] - drill.wall0, 1) for r in runs],
                     "graded_by": entry["worker"] if entry else None,
                     "failed_checks": sorted(c for c, s in mine.items() if s != "pass"),
                     "verdicts_match": not differ and bool(mine)})
    return {"keys": keys, "rows": rows, "lost": lost, "duplicates": duplicates, "mismatches": mismatches,
            "per_worker": per_worker, "distinct_keys": len(set(keys.values()))}


def print_ledger(result: dict) -> None:
    L = result["ledger"]
    both = [t_in("zh", "drill ledger"), "drill ledger"]  # the heading in both languages, the learner's first
    print("\n" + " / ".join(both if lang() == "zh" else both[::-1]))
    print(f"  {'student':<11} {'deliveries':>10}  {'graded by':<14} {'stored':<6} {'verdicts':<9} failed checks")
    for r in L["rows"]:
        print(f"  {r['student']:<11} {r['deliveries']:>10}  {(r['graded_by'] or '—'):<14} "
              f"{'yes' if r['stored'] else 'NO':<6} {'same' if r['verdicts_match'] else 'DIFFER':<9} "
              f"{' '.join(r['failed_checks']) or '—'}")
    rows = [
        (t("folders"), result["folders"]),
        (t("distinct keys (one per folder)"), L["distinct_keys"]),
        (t("results in the store"), sum(r["stored"] for r in L["rows"])),
        (t("lost"), L["lost"]),
        (t("executions (deliveries)"), sum(r["deliveries"] for r in L["rows"])),
        (t("duplicates (executions beyond one per key)"), L["duplicates"]),
        (t("verdicts identical to local"), t("yes") if not L["mismatches"] else
         t("no ({n_mismatches} differ)", n_mismatches=len(L['mismatches']))),
        (t("per worker"), ", ".join(f"{k} {v}" for k, v in sorted(L["per_worker"].items()))),
        (t("distributed wall time"), f"{result['wall_seconds']['distributed']:.1f}s"),
        (t("local -j 1 wall time"), f"{result['wall_seconds']['local']:.1f}s"),
        (t("whole drill"), f"{result['wall_seconds']['drill']:.1f}s"),
    ]
    for label, value in rows:
        print(f"  {label:<44} {value}")
    for m in L["mismatches"]:
        print(f"  ! {m['student']} {m['check']}: distributed {m['distributed']}, local {m['local']}")
    if result.get("no_redelivery_reason"):
        print("  " + t("no redelivery: ") + result["no_redelivery_reason"])
    if result.get("kit_changed"):
        print("  ! " + result["kit_changed"])
    if result.get("chaos_error"):
        print("  " + t("a chaos step failed: ") + result["chaos_error"])
    print("  OK" if result["ok"] else "  " + t("FAILED"))


def run(mode: dict, home: Path) -> dict:
    started = time.monotonic()
    folders = make_class(home, mode["folders"])
    names = student_names([str(f) for f in folders])
    drill = Drill(mode, home)
    result: dict = {"mode": "short" if mode is SHORT else "full", "folders": len(folders), "lessons": mode["lessons"],
                    "visibility_timeout": DRILL_VISIBILITY, "cpus": os.cpu_count()}
    try:
        drill.broker.start()
        W.configure(drill.broker.url)
        drill.graders = [Grader(f"grader{i}", drill.broker.url, home) for i in (1, 2, 3)]
        wait_for("three workers answer ping", lambda: drill.ready_workers({"grader1", "grader2", "grader3"}), 120,
                 every=0.5)
        drill.event("three workers ready", pids=[g.pid for g in drill.graders])
        ids = mode["lessons"]
        drill.keys = {W.grading_key(pack_folder(f), ids, W.kit_version()) for f in folders}
        dist_out = home / "grades-distributed"
        outcome: dict = {}

        def instructor():
            begun = time.monotonic()
            try:
                outcome["students"] = submit_and_collect(folders, ids, dist_out, drill.broker.url,
                                                         timeout=mode["timeout"])
            except Exception as exc:  # noqa: BLE001 - reported in the ledger
                outcome["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                outcome["seconds"] = time.monotonic() - begun
                drill.done_event.set()
        collector = threading.Thread(target=instructor, name="instructor", daemon=True)
        chaos = threading.Thread(target=drill.chaos, name="chaos", daemon=True)
        collector.start()
        chaos.start()
        while collector.is_alive():  # the supervisor, until the instructor has every folder back
            drill.supervise()
            collector.join(timeout=0.5)
        chaos.join(timeout=60)
        result["wall_seconds"] = {"distributed": round(outcome.get("seconds", 0.0), 1)}
        if outcome.get("error"):
            raise DrillError(outcome["error"])
        for g in drill.graders:  # the local comparison gets the CPU to itself
            g.stop(limit=60)

        local_out = home / "grades-local"
        begun = time.monotonic()
        local = subprocess.run([sys.executable, "-m", "checks", "grade", "--lab", *map(str, folders), "--lessons", *ids,
                                "--out", str(local_out), "-j", "1"], cwd=KIT_ROOT, capture_output=True, text=True,
                               timeout=mode["timeout"], env=lab_env(home))
        result["wall_seconds"]["local"] = round(time.monotonic() - begun, 1)
        if local.returncode not in (0, 1):
            raise DrillError(t("the local grade failed: {stderr}", stderr=local.stderr[-500:]))

        L = ledger(drill, folders, names, ids, dist_out, local_out)
        result["ledger"] = L
        result["events"] = drill.events
        result["chaos_error"] = drill.chaos_error
        now = subprocess.run(["git", "-C", str(KIT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        if now.returncode == 0 and now.stdout.strip() != W.kit_version():
            was, now = W.kit_version()[:12], now.stdout.strip()[:12]
            result["kit_changed"] = t("the kit's commit changed during the drill ({was} -> {now}): workers started "
                                      "after it refuse folders, and the local comparison ran the newer code; if "
                                      "anything differs, run it again", was=was, now=now)
        kills = [e for e in drill.events if e["what"].startswith(("SIGKILL", "machine death"))]
        if L["duplicates"] == 0:
            if not kills:
                result["no_redelivery_reason"] = t("nothing was killed: every folder was graded before the step came")
            elif not any(e.get("mid_grade", True) for e in kills):
                result["no_redelivery_reason"] = t("the killed execution had already stored its result and been acked")
            else:
                result["no_redelivery_reason"] = t("a killed execution was not redelivered: a defect")
        result["ok"] = (L["lost"] == 0 and not L["mismatches"] and L["distinct_keys"] == len(folders)
                        and all(r["stored"] for r in L["rows"]) and not drill.chaos_error)
    finally:
        drill.stop_all()
        result["wall_seconds"] = dict(result.get("wall_seconds", {}), drill=round(time.monotonic() - started, 1))
        result.setdefault("events", drill.events)
        result.setdefault("ok", False)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checks.grade_drill", description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="6 folders, lesson 01 (about a minute)")
    parser.add_argument("--out", metavar="FILE.json", help="write the ledger as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the drill's folder (class, logs, reports)")
    args = parser.parse_args(argv)
    # TERM (a test's timeout, a supervisor) ends the drill through its finally blocks: nothing left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = Path(tempfile.mkdtemp(prefix="tasklab-drill-"))
    result: dict = {"ok": False}
    try:
        result = run(SHORT if args.short else FULL, home)
    except DrillError as exc:
        result = dict(result, error=str(exc))
        print(t("drill failed: ") + str(exc), file=sys.stderr)
    finally:
        if args.keep:
            print(t("drill folder kept: {home}", home=home), file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    if "ledger" in result:
        print_ledger(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
