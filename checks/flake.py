"""The flake hunt: the reference of chosen lessons, run again and again under load (checks/repeat.py does
the running and counting; this says what it means for the reference).

ROUNDS=5 PARALLEL=4 is 20 runs of each lesson, 4 side by side, each its own `python -m checks run NN`
with its own LAB_HOME, in boxes with servers of their own (where boxes cannot run: in its own isolation
slot of the kit's shared servers — own Redis dbs and schema).  `--burn C` adds C processes burning CPU,
standing in for a slow laptop or a WSL2 VM.  The reference must pass every time: one non-pass is a bug to
find, printed with its message and evidence and written to flake.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from checks import repeat
from shared.i18n import t


def hunt(lesson_ids: list[str], rounds: int, parallel: int, burn: int, out: Path, seed: int | None = None,
         command=repeat.checker_command, stream=sys.stdout) -> int:
    series, rows = repeat.repeat(lesson_ids, rounds * parallel, parallel, burn, out.parent, seed=seed,
                                 command=command, stream=stream)
    non_passes = [dict(x, run=r.number, lesson=r.lesson) for r in series.runs for x in r.tests if repeat.failed(x)]
    checks = sum(len(r.tests) for r in series.runs)
    summary = {"lessons": lesson_ids, "rounds": rounds, "parallel": parallel, "burn": burn, "seed": series.seed,
               "stopped": series.stopped, "wall_seconds": round(series.wall, 1), "lesson_runs": len(series.runs),
               "check_runs": checks, "non_passes": non_passes,
               "runs": [{"lesson": r.lesson, "run": r.number, "slot": r.slot, "seconds": round(r.seconds, 1),
                         "checks": len(r.tests)} for r in sorted(series.runs, key=lambda r: (r.lesson, r.number))]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    print(t("\n{checks} check runs, {n_non_passes} non-passes, wall {wall:.0f}s; JSON: {out}", checks=checks, out=out,
            n_non_passes=len(non_passes), wall=series.wall), file=stream)
    if series.stopped:
        return 130
    return 1 if non_passes else 0
