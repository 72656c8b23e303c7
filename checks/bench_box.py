"""What a box costs: the same one-check lesson run bare and boxed, without and with servers.

    .venv/bin/python -m checks.bench_box [--rounds N] [--out FILE.json]

A table and JSON; nothing is asserted.  "bare" with servers uses the kit's shared servers (already up,
as on a learner's machine between runs); "boxed" starts a private Redis and MariaDB in the box each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared.i18n import t_in

VERIFIER = """
from shared.tap import main_guard
def main(tap):
    with tap.check("00.1"):
        pass
main_guard(main)
"""


def _lesson(root: Path, services: list[str]) -> dict:
    folder = root / "00-bench"
    (folder / "verifiers").mkdir(parents=True, exist_ok=True)
    (folder / "verifiers" / "verify_bench.py").write_text(VERIFIER)
    return {"id": "00", "slug": "bench", "folder": str(folder), "status": "ready", "services": services,
            "title": {"zh": t_in("zh", "bench"), "en": "bench"}, "group": {"zh": t_in("zh", "group"), "en": "group"},
            "processes": [],
            "checks": [{"id": "00.1", "kind": "core", "text": {"zh": "x", "en": "x"}, "verifier": "verify_bench.py",
                        "points": 1, "timeout": 120, "hint": {"zh": "x", "en": "x"}}]}


def measure(services: list[str], boxed: bool, rounds: int) -> list[float]:
    os.environ["LAB_BOX"] = "on" if boxed else "off"
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lesson = _lesson(root, services)
        for n in range(rounds):
            work = materialise([lesson], lesson, root / f"work{n}")
            started = time.monotonic()
            if services and not boxed:
                from shared import servicectl
                with servicectl.in_use():
                    servicectl.up(services)
                    result = run_lesson(lesson, work, root / f"logs{n}", lessons=[lesson])
            else:
                result = run_lesson(lesson, work, root / f"logs{n}", lessons=[lesson])
            times.append(time.monotonic() - started)
            assert result.checks[0].status == PASS, result.checks[0].message
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for label, services in (("no services", []), ("redis + mariadb", ["redis", "mysql"])):
        bare = measure(services, False, args.rounds)
        boxed = measure(services, True, args.rounds)
        rows.append({"lesson": label, "bare_median_s": round(statistics.median(bare), 3),
                     "boxed_median_s": round(statistics.median(boxed), 3),
                     "added_s": round(statistics.median(boxed) - statistics.median(bare), 3),
                     "bare_s": [round(x, 3) for x in bare], "boxed_s": [round(x, 3) for x in boxed]})
    print(f"{'one-check lesson':<18} {'bare':>8} {'boxed':>8} {'added':>8}   (median of {args.rounds} runs, seconds)")
    for row in rows:
        print(f"{row['lesson']:<18} {row['bare_median_s']:>8.3f} {row['boxed_median_s']:>8.3f} {row['added_s']:>8.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
