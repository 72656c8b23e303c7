"""The flake hunt: the reference of chosen lessons, N rounds; in each round every lesson runs K times side by
side (so ROUNDS=5 PARALLEL=4 is 20 runs of each lesson).

Each run is `python -m checks run NN --report …` with its own LAB_HOME, so runs never share a work folder,
in boxes with servers of their own (where boxes cannot run: in its own isolation slot of the kit's shared
servers — own Redis dbs and schema).  `--burn C` adds C processes that burn CPU for the
whole hunt, standing in for a slow laptop or a WSL2 VM.  Every non-pass is printed with its message and
evidence and written to JSON.  The reference must pass every time: one non-pass is a bug to find.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from shared.i18n import t
from shared.proc import Process

FIRST_SLOT = 1  # slot 0 is the learner's own; runs use 1..K


def _burners(count: int, log_dir: Path) -> list[Process]:
    # A tight loop per process: a busy core, no memory, stopped by PID at the end.
    return [Process([sys.executable, "-c", "while True: pass"], cwd=log_dir, log_path=log_dir / f"burn-{i}.log")
            for i in range(count)]


def _one_run(lesson_id: str, slot: int, home: Path, report: Path) -> tuple[list[dict], float, str]:
    env = dict(os.environ, LAB_SLOT=str(slot), LAB_HOME=str(home), LAB_LANG=os.environ.get("LAB_LANG", "en"))
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "checks", "run", lesson_id, "--report", str(report)], env=env,
                         capture_output=True, text=True, encoding="utf-8", errors="replace")
    seconds = time.monotonic() - started
    try:
        tests = json.loads(report.read_text(encoding="utf-8"))["tests"]
    except (OSError, ValueError, KeyError):
        tests = []
    if not tests:  # no report at all: the whole run is one non-pass, with the runner's own words
        tail = (run.stdout + run.stderr).strip().splitlines()[-10:]
        tests = [{"id": f"{lesson_id}.*", "status": "error", "message": f"no report (exit {run.returncode})",
                  "output": "\n".join(tail)}]
    return tests, seconds, run.stdout


def hunt(lesson_ids: list[str], rounds: int, parallel: int, burn: int, out: Path) -> int:
    if not 1 <= parallel <= 7:
        raise ValueError(t("PARALLEL must be 1 to 7 (each parallel run takes an isolation slot)"))
    jobs: queue.Queue = queue.Queue()
    for round_no in range(1, rounds + 1):
        for lesson_id in lesson_ids:
            for _ in range(parallel):  # K copies of each lesson per round, taken by the K runners at once
                jobs.put((round_no, lesson_id))
    scratch = Path(tempfile.mkdtemp(prefix="lab-flake-"))
    runs, lock = [], threading.Lock()

    def worker(slot: int) -> None:
        while True:
            try:
                round_no, lesson_id = jobs.get_nowait()
            except queue.Empty:
                return
            home = scratch / f"slot{slot}"
            tests, seconds, _ = _one_run(lesson_id, slot, home, scratch / f"r{round_no}-{lesson_id}-s{slot}.json")
            bad = [x for x in tests if x["status"] not in ("pass", "skipped")]
            with lock:
                runs.append({"round": round_no, "lesson": lesson_id, "slot": slot, "seconds": round(seconds, 1),
                             "checks": len(tests), "non_passes": bad})
                mark = "✓" if not bad else "✗"
                print(f"  {mark} round {round_no} lesson {lesson_id} slot {slot}: {len(tests) - len(bad)}/{len(tests)}"
                      f" in {seconds:.1f}s", flush=True)
                for x in bad:
                    print(f"      {x['id']} {x['status']}: {x.get('message', '')}")
                    for line in (x.get("output") or "").splitlines()[-8:]:
                        print(f"      | {line}")

    print(t("flake hunt: lessons {lesson_ids} × {rounds} rounds, {parallel} in parallel, {burn} CPU burners",
            lesson_ids=', '.join(lesson_ids), rounds=rounds, parallel=parallel, burn=burn), flush=True)
    started = time.monotonic()
    burners = _burners(burn, scratch)
    try:
        threads = [threading.Thread(target=worker, args=(FIRST_SLOT + i,)) for i in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for proc in burners:
            proc.stop(grace=1)
    wall = time.monotonic() - started
    checks = sum(r["checks"] for r in runs)
    non_passes = [dict(x, round=r["round"], lesson=r["lesson"]) for r in runs for x in r["non_passes"]]
    summary = {"lessons": lesson_ids, "rounds": rounds, "parallel": parallel, "burn": burn,
               "wall_seconds": round(wall, 1), "lesson_runs": len(runs), "check_runs": checks,
               "non_passes": non_passes, "runs": sorted(runs, key=lambda r: (r["lesson"], r["round"]))}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    print(t("\n{checks} check runs, {n_non_passes} non-passes, wall {wall:.0f}s; JSON: {out}", checks=checks, out=out,
            n_non_passes=len(non_passes), wall=wall))
    return 1 if non_passes else 0
