"""Grade a made-up class twice — one folder at a time and N at a time — and compare times and verdicts.

    .venv/bin/python -m checks.bench_class [--lessons 01 02 03|all] [--jobs 4] [--workers 3] [--folders 30]
                                            [--skip-serial | --serial-only] [--against DIR] [--out FILE.json]

The class (30 folders): 10 copies of the finished reference, 10 folders each with one mutant of the
test suite (tests/mutants) for a lesson of the chosen ones, and 10 hostile folders (a forged TAP line,
a patched checker, a shared/ package, a secrets reader, kill -9 -1, a fork bomb, a memory hog, an output
flood, a daemon left running, a disk filler).  It prints a table and writes JSON; nothing is asserted
but that every grading gave the same verdicts.  `--workers N` also grades the class through a private
broker and N grading workers (checks/distributed.py), each a separate process standing in for a machine.
`--against DIR` compares with the reports an earlier run kept (`--keep DIR`: one folder per grading), so
the hour-long -j 1 grading can be measured on its own and still be held against the others.
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
import time
from pathlib import Path

from checks.workdir import reference_files
from shared import manifest
from shared.proc import wait_until

HOSTILE = {
    "forge-tap": "import os\nprint('ok 1 - 01.1'); os._exit(0)\n",
    "patch-checker": "import sys\nt = sys.modules.get('shared.tap')\nif t: t._Check.__exit__ = lambda s, *a: True\n",
    "shared-package": None,  # a shared/tap.py that always says ok
    "read-secrets": "import pathlib\nfor p in ('/root/.ssh/id_rsa', '.env.tasks'):\n    try:\n"
                    "        print(pathlib.Path(p).read_text()[:20])\n    except OSError:\n        pass\n",
    "kill-all": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n",
    "memory-hog": "hog = []\nwhile True:\n    hog.append(bytearray(64 * 1024 * 1024))\n",
    "output-flood": "import sys\nfor _ in range(200000):\n    sys.stdout.write('x' * 1000 + '\\n')\n",
    "daemon": "import subprocess, sys\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n",
    "disk-filler": "n = 0\nwhile True:\n    open(f'fill-{n}.bin', 'wb').write(b'0' * (64 << 20)); n += 1\n",
}


def make_class(root: Path, lessons: list[str]) -> list[Path]:
    data = manifest.load()
    last = max(lessons)
    reference = reference_files(data["lessons"], last)
    folders = []

    def copy(name: str) -> Path:
        folder = root / name / "tasks_lab"
        for rel, src in reference.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, folder / rel)
        folders.append(folder)
        return folder

    for n in range(10):
        copy(f"reference-{n:02d}")
    sys.path.insert(0, str(manifest.KIT_ROOT))
    from tests.mutants import all_mutants
    usable = [m for m in all_mutants() if m.lesson in lessons and not m.on]
    for n, mutant in enumerate(usable[:: max(1, len(usable) // 10)][:10]):
        folder = copy(f"mutant-{n:02d}")
        try:
            mutant.apply(folder)
        except AssertionError:  # the later lessons rewrote that file: the mutant's lesson only
            pass
    for name, code in HOSTILE.items():
        folder = copy(f"hostile-{name}")
        if code is None:
            (folder / "shared").mkdir()
            (folder / "shared" / "__init__.py").write_text("")
            (folder / "shared" / "tap.py").write_text("def main_guard(run):\n    raise SystemExit(0)\n")
        else:
            path = folder / "api_states.py"
            path.write_text(code + path.read_text(encoding="utf-8"), encoding="utf-8")
    return folders


def grade(folders: list[Path], lessons: list[str], out: Path, jobs: int, env: dict | None = None,
          extra: tuple[str, ...] = ()) -> tuple[float, dict]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "checks", "grade", "--lab", *map(str, folders), "--lessons", *lessons,
                    "--out", str(out), "-j", str(jobs), *extra], cwd=manifest.KIT_ROOT, capture_output=True, env=env)
    seconds = time.monotonic() - started
    return seconds, verdicts_in(out)


def grade_on_workers(folders: list[Path], lessons: list[str], out: Path, workers: int,
                     home: Path) -> tuple[float, dict]:
    """The same class through a private broker and `workers` grading workers (-c 1 each, separate
    processes standing in for machines); the clock starts when every worker is up."""
    from checks.drill_machines import Broker, lab_env
    home.mkdir(parents=True, exist_ok=True)
    broker = Broker(home)
    broker.start()
    env = dict(lab_env(home), LAB_GRADE_BROKER=broker.url)
    procs = []
    try:
        for n in range(workers):
            with open(home / f"grader{n}.log", "wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "checks.distributed", "worker", "-c", "1",
                                               "-n", f"grader{n}@%h"], cwd=manifest.KIT_ROOT, env=env, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        for n in range(workers):  # ready: each worker's log says so
            log = home / f"grader{n}.log"
            wait_until(lambda log=log: b"ready." in log.read_bytes(), 120, f"grading worker {n} to be ready")
        return grade(folders, lessons, out, 1, env=env, extra=("--broker", broker.url))
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        broker.stop()


def verdicts_in(out: Path) -> dict:
    verdicts = {}
    for report in sorted(out.glob("*.json")):
        body = json.loads(report.read_text())
        verdicts[report.stem] = {t["id"] + ("r" if t["regression"] else ""): t["status"] for t in body["tests"]}
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", nargs="+", default=["01", "02", "03"])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--out", default=None)
    parser.add_argument("--workers", type=int, default=0, help="also grade through a broker and N grading workers")
    parser.add_argument("--folders", type=int, default=30, help="the first N folders of the class (a mix)")
    parser.add_argument("--skip-serial", action="store_true", help="leave out the -j 1 grading")
    parser.add_argument("--serial-only", action="store_true", help="only the -j 1 grading")
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy each grading's reports here")
    parser.add_argument("--against", default=None, metavar="DIR", help="also compare with the gradings kept in DIR")
    args = parser.parse_args()
    if args.lessons == ["all"]:
        args.lessons = [lesson["id"] for lesson in manifest.load()["lessons"] if lesson["status"] == "ready"]
    result = {"lessons": args.lessons}

    def save() -> None:  # after each grading, so a long run that is stopped still leaves its figures
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = make_class(root / "class", args.lessons)
        folders = [folders[i] for i in sorted(range(len(folders)), key=lambda i: (i % 10, i))][:args.folders]
        result["folders"] = len(folders)
        print(f"{len(folders)} folders × lessons {' '.join(args.lessons)}", flush=True)
        verdicts = {}
        runs = [f"j{args.jobs}"] + ([f"w{args.workers}"] if args.workers else []) + ([] if args.skip_serial else ["j1"])
        if args.serial_only:
            runs = ["j1"]
        for run in runs:  # the parallel run first: the quicker figure is there early
            if run.startswith("w"):
                seconds, verdicts[run] = grade_on_workers(folders, args.lessons, root / run, args.workers,
                                                          root / "home")
                label = f"{args.workers} workers"
            else:
                seconds, verdicts[run] = grade(folders, args.lessons, root / run, int(run[1:]))
                label = f"-j {run[1:]}"
            result[f"seconds_{run}"] = round(seconds, 1)
            print(f"  {label}: {seconds:7.1f} s", flush=True)
            if args.keep:  # the reports themselves, to read after the class folder is gone
                shutil.copytree(root / run, Path(args.keep) / run, dirs_exist_ok=True)
            save()
    if args.against:  # earlier gradings of the same class, kept as reports
        for kept in sorted(p for p in Path(args.against).iterdir() if p.is_dir() and p.name not in verdicts):
            verdicts[kept.name] = verdicts_in(kept)
            runs.append(kept.name)
            print(f"  compared with: {kept} ({len(verdicts[kept.name])} reports)", flush=True)
    first = verdicts[runs[0]]
    same = all(v == first for v in verdicts.values())
    differ = {}  # folder -> check -> status per run, where the runs disagree
    for seen in verdicts.values():
        for folder in sorted(set(first) | set(seen)):
            a, b = first.get(folder, {}), seen.get(folder, {})
            for check in sorted(set(a) | set(b)):
                if a.get(check) != b.get(check):
                    differ.setdefault(folder, {})[check] = {r: verdicts[r].get(folder, {}).get(check) for r in runs}
    for folder, checks in differ.items():
        print(f"  differs: {folder}: " + "; ".join(f"{c} {v}" for c, v in checks.items()))
    result["differences"] = differ
    passed = sum(all(s in ("pass", "skipped", "superseded") for s in v.values()) for v in first.values())
    result.update(same_verdicts=same, folders_all_passed=passed, runs=runs)
    print(f"  same verdicts every way: {same}; folders with every check passed: {passed} (the references)")
    save()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
