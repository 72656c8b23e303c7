"""Grade a made-up class twice — one folder at a time and N at a time — and compare times and verdicts.

    .venv/bin/python -m checks.bench_class [--lessons 01 02 03] [--jobs 4] [--out FILE.json]

The class (30 folders): 10 copies of the finished reference, 10 folders each with one mutant of the
test suite (tests/mutants) for a lesson of the chosen ones, and 10 hostile folders (a forged TAP line,
a patched checker, a shared/ package, a secrets reader, kill -9 -1, a fork bomb, a memory hog, an output
flood, a daemon left running, a disk filler).  It prints a table and writes JSON; nothing is asserted
but that both gradings gave the same verdicts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checks.workdir import reference_files
from shared import manifest

HOSTILE = {
    "forge-tap": "import os\nprint('ok 1 - 01.1'); os._exit(0)\n",
    "patch-checker": "import sys\nt = sys.modules.get('shared.tap')\nif t: t._Check.__exit__ = lambda s, *a: True\n",
    "shared-package": None,  # a shared/tap.py that always says ok
    "read-secrets": "import pathlib\nfor p in ('/root/.ssh/id_rsa', '.env.tasks'):\n    try:\n        print(pathlib.Path(p).read_text()[:20])\n    except OSError:\n        pass\n",
    "kill-all": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n",
    "memory-hog": "hog = []\nwhile True:\n    hog.append(bytearray(64 * 1024 * 1024))\n",
    "output-flood": "import sys\nfor _ in range(200000):\n    sys.stdout.write('x' * 1000 + '\\n')\n",
    "daemon": "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n",
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


def grade(folders: list[Path], lessons: list[str], out: Path, jobs: int) -> tuple[float, dict]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "checks", "grade", "--lab", *map(str, folders), "--lessons", *lessons,
                    "--out", str(out), "-j", str(jobs)], cwd=manifest.KIT_ROOT, capture_output=True)
    seconds = time.monotonic() - started
    verdicts = {}
    for report in sorted(out.glob("*.json")):
        body = json.loads(report.read_text())
        verdicts[report.stem] = {t["id"] + ("r" if t["regression"] else ""): t["status"] for t in body["tests"]}
    return seconds, verdicts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", nargs="+", default=["01", "02", "03"])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.lessons == ["all"]:
        args.lessons = [l["id"] for l in manifest.load()["lessons"] if l["status"] == "ready"]
    result = {"lessons": args.lessons}

    def save() -> None:  # after each grading, so a long run that is stopped still leaves its figures
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = make_class(root / "class", args.lessons)
        result["folders"] = len(folders)
        print(f"{len(folders)} folders × lessons {' '.join(args.lessons)}", flush=True)
        verdicts = {}
        for jobs in (args.jobs, 1):  # the parallel run first: the quicker figure is there early
            seconds, verdicts[jobs] = grade(folders, args.lessons, root / f"j{jobs}", jobs)
            result[f"seconds_j{jobs}"] = round(seconds, 1)
            print(f"  -j {jobs}: {seconds:7.1f} s", flush=True)
            save()
    same = verdicts[1] == verdicts[args.jobs]
    passed = sum(all(s in ("pass", "skipped", "superseded") for s in v.values()) for v in verdicts[1].values())
    result.update(same_verdicts=same, folders_all_passed=passed)
    print(f"  same verdicts both ways: {same}; folders with every check passed: {passed} (the 10 references)")
    save()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
