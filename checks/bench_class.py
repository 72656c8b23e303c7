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

Beside each wall time it gives the CPU-seconds the grading used and the least wall time they allow on this
machine (CPU s / cores: no -j can beat it), and how far the grading is above it.  CPU is counted by a
cgroup the grading runs in (cpuacct as root on cgroup v1, cpu.stat on v2), not by getrusage: processes in
a box are reaped inside its pid namespace, so RUSAGE_CHILDREN never sees them; without a cgroup it is the
machine's busy CPU from /proc/stat, which counts anything else running too (the JSON says which).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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


CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1's CPU accounting (the kit's boxes use cpu, not cpuacct)
CGROUP2_MOUNTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))  # unified, or hybrid's v2 part
PROC_STAT = Path("/proc/stat")
METHOD_NOTES = {"cgroup": "cgroup: the grading's own processes only",
                "machine": "machine-wide (includes anything else running)"}


class CpuMeter:
    """CPU-seconds used since the meter began: by the processes started with `prefix` (and those `join`ed)
    when `method` is "cgroup", by the whole machine when it is "machine"."""

    def __init__(self, method: str, group: Path | None = None):
        self.method, self.group = method, group
        self.prefix: list[str] = []
        if group is not None:  # a shell joins the group, then becomes the command: all it starts counts
            procs = shlex.quote(str(group / "cgroup.procs"))
            self.prefix = ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
        self._start = 0.0 if group is not None else machine_busy_seconds()

    def read(self) -> float:
        if self.group is None:
            return machine_busy_seconds() - self._start
        if (self.group / "cpuacct.usage").exists():
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines() if line.strip())
        return int(stat["usage_usec"]) / 1e6

    def join(self, pid: int) -> None:
        """Count a process that is already running (from now on); machine-wide counts it anyway."""
        if self.group is not None:
            (self.group / "cgroup.procs").write_text(str(pid))


def machine_busy_seconds() -> float:
    """The machine's busy CPU since boot: user, nice, system, irq and softirq of /proc/stat's `cpu` line."""
    fields = PROC_STAT.read_text().splitlines()[0].split()
    assert fields[0] == "cpu", fields
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")


def _cgroup_parents() -> list[Path]:
    """Where a CPU-counting group may be made: cgroup v1's cpuacct as root, unless it is mounted together
    with cpu (the boxes' cpu groups would then take their processes out of ours); then cgroup v2, at its
    root or beside this process's own group (a delegated one, for a plain user)."""
    parents = []
    if os.geteuid() == 0 and (CPUACCT / "cpuacct.usage").exists() and not (CPUACCT / "cpu.shares").exists():
        parents.append(CPUACCT)
    own = ""
    with contextlib.suppress(OSError):
        own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")), "")
    for mount in CGROUP2_MOUNTS:
        if (mount / "cgroup.controllers").exists():
            parents += [mount] + ([mount / own.strip("/")] if own.strip("/") else [])
            break
    return parents


def _make_group() -> Path | None:
    """A fresh group a process can be moved into (tried with a shell, as the grading will be), or None."""
    _sweep_stale_groups()
    name = f"tasklab-bench-{os.getpid()}-{secrets.token_hex(4)}"
    for parent in _cgroup_parents():
        group = parent / name
        try:
            group.mkdir()
        except OSError:
            continue
        usage = group / ("cpuacct.usage" if parent == CPUACCT else "cpu.stat")
        probe = subprocess.run([*CpuMeter("cgroup", group).prefix, "true"], stderr=subprocess.DEVNULL)
        if probe.returncode == 0 and usage.exists():
            return group
        _remove_group(group)
    return None


def _remove_group(group: Path) -> None:
    for _ in range(100):  # the kernel takes a moment to let go of the last exited process
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    print(f"  note: could not remove {group} (a process still in it?)", file=sys.stderr)


def _sweep_stale_groups() -> None:
    """Empty groups of earlier benches that were killed before their clean-up (their pid is gone)."""
    for parent in (CPUACCT, *CGROUP2_MOUNTS):
        for group in parent.glob("tasklab-bench-*") if parent.is_dir() else ():
            pid = group.name.split("-")[2]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    group.rmdir()  # refused while a process is still in it


@contextlib.contextmanager
def cpu_meter(method: str | None = None) -> Iterator[CpuMeter]:
    """A CpuMeter: "cgroup" if a group can be made here (or `method="cgroup"`: else OSError), "machine"
    otherwise (or when asked for).  Start what is measured with `meter.prefix + argv`; the group goes after."""
    group = None if method == "machine" else _make_group()
    if group is None and method == "cgroup":
        raise OSError("no cgroup for CPU accounting can be made here")
    try:
        yield CpuMeter("cgroup" if group else "machine", group)
    finally:
        if group is not None:
            _remove_group(group)


def bound_figures(wall: float, cpu: float, folders: int, cores: int) -> dict:
    """The least wall time `cpu` CPU-seconds allow on `cores` cores, and how far `wall` is above it."""
    bound = cpu / cores
    return {"cpu_seconds": round(cpu, 1), "cpu_seconds_per_folder": round(cpu / folders, 2) if folders else None,
            "cpu_bound_seconds": round(bound, 1), "wall_over_bound": round(wall / bound, 2) if bound > 0 else None}


HEADER = f"  {'run':<12} {'wall s':>8} {'CPU s':>8} {'CPU s/folder':>12} {'CPU bound s':>11}  wall ÷ bound"


def row(label: str, wall: float, cpu: float, folders: int, cores: int) -> str:
    """One line of the table under HEADER: wall s, CPU s, CPU s per folder, the CPU bound, wall ÷ bound."""
    bound = cpu / cores
    per_folder = f"{cpu / folders:.2f}" if folders else "-"
    ratio = f"{wall / bound:.2f}x the CPU bound" if bound > 0 else "-"
    return f"  {label:<12} {wall:8.1f} {cpu:8.1f} {per_folder:>12} {bound:11.1f}  {ratio}"


def grade(folders: list[Path], lessons: list[str], out: Path, jobs: int, env: dict | None = None,
          extra: tuple[str, ...] = (), meter: CpuMeter | None = None) -> tuple[float, float, str, dict]:
    """Grade the class once: wall seconds, CPU seconds (by `meter`, else a meter of its own), its method, verdicts."""
    with contextlib.ExitStack() as stack:
        meter = meter or stack.enter_context(cpu_meter())
        cpu_before = meter.read()
        started = time.monotonic()
        subprocess.run([*meter.prefix, sys.executable, "-m", "checks", "grade", "--lab", *map(str, folders),
                        "--lessons", *lessons, "--out", str(out), "-j", str(jobs), *extra],
                       cwd=manifest.KIT_ROOT, capture_output=True, env=env)
        seconds = time.monotonic() - started
        cpu = meter.read() - cpu_before
    return seconds, cpu, meter.method, verdicts_in(out)


def grade_on_workers(folders: list[Path], lessons: list[str], out: Path, workers: int,
                     home: Path) -> tuple[float, float, str, dict]:
    """The same class through a private broker and `workers` grading workers (-c 1 each, separate
    processes standing in for machines); the clock starts when every worker is up.  The CPU counted is
    the workers', the broker's and the grading command's, from that moment."""
    from checks.drill_machines import Broker, lab_env
    home.mkdir(parents=True, exist_ok=True)
    broker = Broker(home)
    procs = []
    with cpu_meter() as meter:
        broker.start()
        try:
            meter.join(broker.proc.pid)
            env = dict(lab_env(home), LAB_GRADE_BROKER=broker.url)
            for n in range(workers):
                with open(home / f"grader{n}.log", "wb") as log:
                    procs.append(subprocess.Popen([*meter.prefix, sys.executable, "-m", "checks.distributed",
                                                   "worker", "-c", "1", "-n", f"grader{n}@%h"],
                                                  cwd=manifest.KIT_ROOT, env=env, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True))
            for n in range(workers):  # ready: each worker's log says so
                log = home / f"grader{n}.log"
                wait_until(lambda log=log: b"ready." in log.read_bytes(), 120, f"grading worker {n} to be ready")
            return grade(folders, lessons, out, 1, env=env, extra=("--broker", broker.url), meter=meter)
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
        cores = os.cpu_count() or 1
        result["cores"] = cores
        runs = [f"j{args.jobs}"] + ([f"w{args.workers}"] if args.workers else []) + ([] if args.skip_serial else ["j1"])
        if args.serial_only:
            runs = ["j1"]
        print(HEADER, flush=True)
        for run in runs:  # the parallel run first: the quicker figure is there early
            if run.startswith("w"):
                seconds, cpu, method, verdicts[run] = grade_on_workers(folders, args.lessons, root / run,
                                                                       args.workers, root / "home")
                label = f"{args.workers} workers"
            else:
                seconds, cpu, method, verdicts[run] = grade(folders, args.lessons, root / run, int(run[1:]))
                label = f"-j {run[1:]}"
            result[f"seconds_{run}"] = round(seconds, 1)
            result[f"cpu_{run}"] = {"method": method, **bound_figures(seconds, cpu, len(folders), cores)}
            print(row(label, seconds, cpu, len(folders), cores) + f"  [CPU: {METHOD_NOTES[method]}]", flush=True)
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
