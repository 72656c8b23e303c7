"""The kit's own scripts run in a lesson's reference folder, boxed with the lesson's servers: the teaching
benchmarks (a table and JSON each, never asserted) and the soak (jobs under chaos, then a ledger)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from checks import boxfiles, timelines
from checks.monitor import HISTORY_NAME, read_history
from checks.sandbox import boxing, run_script
from checks.selection import load, select
from checks.workdir import STATE_DIR, materialise
from shared import servicectl
from shared.i18n import t

BENCHMARKS = [("07", "bench_taskcenter.py", "taskcenter.json"),
              ("13", "checks.tools.bench_durable", "durable.json")]


def run_kit_script(lesson_id: str, script: str, args: list[str], exclusive: bool = False,
                   monitor: bool = False) -> int:
    """Run one of the kit's scripts (a benchmark, the soak) in a fresh reference folder of its lesson, in
    a box of its own with the lesson's servers (what a check run gets: servers, .env.tasks, a fresh
    database); the script starts and stops its own processes.  Its --out file is written inside the box's
    log folder and copied to where it was asked for.  Without a box: the kit's servers, and `exclusive`
    (it stops or restarts a server) keeps every check away meanwhile.

    `script`: a lesson's own file (bench_taskcenter.py) or one of the kit's tools (checks.tools.soak),
    run as `python -m` so the lesson's modules in the work folder import as they do for its scripts.
    """
    data = load()
    [lesson] = select(data, [lesson_id], allow_planned=False)
    name = script.rsplit(".", 1)[-1] if not script.endswith(".py") else Path(script).stem
    command = [script] if script.endswith(".py") else ["-m", script]
    workdir = materialise(data["lessons"], lesson, STATE_DIR / "work" / name)
    log_dir = STATE_DIR / "logs" / name
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    wanted = None
    if "--out" in args:
        at = args.index("--out") + 1
        wanted, args = Path(args[at]), [*args[:at], str(log_dir / Path(args[at]).name), *args[at + 1:]]
    if lesson.get("services") and boxing() != "on":
        with servicectl.in_use(exclusive=exclusive):
            servicectl.up(lesson["services"])
            code = run_script(lesson, workdir, log_dir, [*command, *args], monitor)
    else:
        code = run_script(lesson, workdir, log_dir, [*command, *args], monitor)
    if wanted is not None:  # written in the box: read back as data (no link followed, capped)
        try:
            made = boxfiles.read(log_dir / wanted.name, 64 << 20)
        except OSError:
            made = None
        if made is not None:
            wanted.parent.mkdir(parents=True, exist_ok=True)
            wanted.write_bytes(made)
    return code


def bench(quick: bool) -> int:
    """Benchmarks that teach: each prints a table and writes JSON; nothing is asserted."""
    worst = 0
    for lesson_id, script, out_name in BENCHMARKS:
        out = STATE_DIR / "bench" / out_name
        out.parent.mkdir(parents=True, exist_ok=True)
        code = run_kit_script(lesson_id, script, ["--out", str(out)] + (["--quick"] if quick else []))
        print(t("results JSON: {relpath}", relpath=os.path.relpath(out)))
        worst = max(worst, 0 if code == 0 else 1)
    return worst


def soak(jobs: int, seed: int | None) -> int:
    """The soak: many jobs through the whole durable path while a chaos loop kills workers and
    restarts both servers; then every acknowledged submit is accounted for (lost must be 0)."""
    out = STATE_DIR / "soak" / "ledger.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["--jobs", str(jobs), "--out", str(out)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    code = run_kit_script("16", "checks.tools.soak", argv, exclusive=True, monitor=True)
    print(t("ledger JSON: {relpath}", relpath=os.path.relpath(out)))
    if out.is_file():  # and a page: the ledger, the backlog over time (the monitor's feed), the chaos
        page = out.with_suffix(".html")
        history = read_history(STATE_DIR / "logs" / "soak" / HISTORY_NAME)
        timelines.write_soak_page(page, json.loads(out.read_text(encoding="utf-8")), history)
        print(t("ledger page: {relpath}", relpath=os.path.relpath(page)))
    return 0 if code == 0 else 1
