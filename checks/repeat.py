"""Run a lesson's checks many times, side by side, under load, and say which checks pass only by chance.

    make check REPEAT=20 BURN=2 PARALLEL=2      # the learner's folder
    make flake ROUNDS=5 PARALLEL=4 BURN=2       # the reference (checks/flake.py uses this module)

A *series* is N runs of each chosen lesson.  Each run is its own `python -m checks run NN --report …`
process (its own LAB_HOME and isolation slot, boxed as usual), K at a time, while C processes burn CPU in
place of a slow laptop.  What the kit randomises — the order the runs start in and which CPU each burner
is pinned to — comes from one seed, printed first; SEED=S replays those conditions.

The verdicts are the runs' own reports; this module only counts them.  A check that passed some runs
and failed others is *flaky in your code*: shown first, with one failing run's evidence beside one
passing run's.  "Failed every run", "passed every run" and "skipped" are said only of a check that did so
in every run of the series; one tried in some runs only (skipped, or not run, in the others) is named with
its counts -- classify() decides, for the table, repeat.json and the page alike.  What the terminal shows
of a failure is cut in the middle if it must be, never at its end, where the cause is (keep_cause()).
Ctrl-C (or TERM) stops the series: no new run starts, the runs under way are stopped by their process
groups, the burners end, and the table of what was seen so far is printed.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from checks.results import NO_VERDICT, PASS
from shared.i18n import listed, t
from shared.proc import Process

FIRST_SLOT = 1    # slot 0 is the learner's own kit servers; runs take 1..K
MAX_PARALLEL = 7  # each run side by side takes an isolation slot
STOP_GRACE = 20.0  # seconds a stopped run has to end its boxes and servers before its group is killed


def failed(test: dict) -> bool:
    """Anything but a pass or a check not tried is a failure -- an unknown status too (fail closed)."""
    return test.get("status") not in (PASS, *NO_VERDICT)


@dataclass
class Run:
    lesson: str
    number: int                      # 1..N within its lesson
    slot: int = 0
    seconds: float = 0.0
    tests: list[dict] = field(default_factory=list)
    exit_code: int | None = None
    report: Path | None = None       # its results.json (kept: the evidence)

    @property
    def label(self) -> str:
        return f"{self.lesson}#{self.number}"


@dataclass
class Series:
    lessons: list[str]
    times: int
    parallel: int
    burn: int
    seed: int
    lab: Path | None = None          # None: the reference
    runs: list[Run] = field(default_factory=list)   # finished runs, in the order they finished
    planned: int = 0
    stopped: bool = False
    wall: float = 0.0


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 100_000)


def start_order(lessons: list[str], times: int, seed: int) -> list[Run]:
    """Every run of the series, shuffled by the seed (the same seed, the same order)."""
    runs = [Run(lesson, number) for number in range(1, times + 1) for lesson in lessons]
    random.Random(seed).shuffle(runs)
    return runs


def burner_cpus(burn: int, seed: int) -> list[int | None]:
    """The CPU each burner is pinned to (None where this machine cannot pin): the CPUs in an order the
    seed shuffles, taken in turn, so C burners load min(C, CPUs) different cores."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None] * burn
    random.Random(seed).shuffle(cpus)
    return [cpus[i % len(cpus)] for i in range(burn)]


def start_burners(burn: int, seed: int, log_dir: Path) -> list[Process]:
    # A tight loop per process: a busy core, no memory, stopped by PID at the end.
    burners = []
    for i, cpu in enumerate(burner_cpus(burn, seed)):
        proc = Process([sys.executable, "-c", "while True: pass"], cwd=log_dir, log_path=log_dir / f"burn-{i}.log")
        burners.append(proc)
        if cpu is not None:
            try:
                os.sched_setaffinity(proc.pid, {cpu})
            except OSError:
                pass  # pinning is a nicety: an unpinned burner still burns
    return burners


def checker_command(run: Run, lab: Path | None) -> list[str]:
    """The command of one run: the kit's own runner, writing its report where the series reads it."""
    command = [sys.executable, "-m", "checks", "run", run.lesson, "--report", str(run.report)]
    return command + (["--lab", str(lab)] if lab else [])


class Runner:
    """Runs a series' runs K at a time and stops them cleanly.  `command(run, lab)` gives a run's argv
    (tests give one that writes a report without checking anything)."""

    def __init__(self, series: Series, out: Path, command=checker_command, stream=sys.stdout):
        self.series, self.out, self.command, self.stream = series, out, command, stream
        self.pending = start_order(series.lessons, series.times, series.seed)
        self.series.planned = len(self.pending)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.children: dict[int, Process] = {}  # slot -> the run under way there
        self.scratch = Path(tempfile.mkdtemp(prefix="lab-repeat-"))
        _remove_tree(out / "runs")  # this series' reports only: an earlier series' are not its evidence
        self.started = 0.0

    def take(self) -> Run | None:
        with self.lock:
            if self.stopping.is_set() or not self.pending:
                return None
            return self.pending.pop(0)

    def run_one(self, run: Run, slot: int) -> None:
        run.slot = slot
        run.report = self.out / "runs" / f"{run.lesson}-run{run.number:03d}.json"
        run.report.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, LAB_SLOT=str(slot), LAB_HOME=str(self.scratch / f"slot{slot}"),
                   LAB_LANG=os.environ.get("LAB_LANG", "en"))
        started = time.monotonic()
        with self.lock:
            if self.stopping.is_set():
                return
            # Its own session: a Ctrl-C in the terminal reaches the series, which stops the runs in order.
            proc = Process(self.command(run, self.series.lab), cwd=Path.cwd(), env=env,
                           log_path=self.scratch / f"run-{run.lesson}-{run.number}.log")
            self.children[slot] = proc
        proc.wait_ended()
        with self.lock:  # reaped only under the lock, so stop_children never signals a reaped group
            self.children.pop(slot, None)
            run.exit_code = proc.stop(grace=0)  # and what it left running in its group is killed
            if self.stopping.is_set():
                return  # stopped part-way: its report (if any) is not a verdict
        run.seconds = time.monotonic() - started
        run.tests = read_report(run, proc.log_text())
        with self.lock:
            self.series.runs.append(run)
            print(self.progress_line(run), file=self.stream, flush=True)
            for test in run.tests:
                if failed(test):
                    print(f"      {test['id']} {test['status']}: {one_line(test.get('message'))}", file=self.stream)

    def progress_line(self, run: Run) -> str:
        done, total = len(self.series.runs), self.series.planned
        elapsed = time.monotonic() - self.started
        eta = elapsed / done * (total - done)
        bad = [x for x in run.tests if failed(x)]
        counted = [x for x in run.tests if x.get("status") not in NO_VERDICT]
        mark = "✗" if bad else "✓"
        return t("  {mark} [{done:>{width}}/{total}] lesson {lesson} run {number}: {passed}/{counted} passed in "
                 "{seconds:.1f}s · ETA {eta:.0f}s", mark=mark, done=done, width=len(str(total)), total=total,
                 lesson=run.lesson, number=run.number, passed=len(counted) - len(bad), counted=len(counted),
                 seconds=run.seconds, eta=eta)

    def worker(self, slot: int) -> None:
        while (run := self.take()) is not None:
            self.run_one(run, slot)

    def stop_children(self) -> None:
        """SIGINT to every run's process group (the runner ends its boxes and servers, as on a Ctrl-C of its
        own); what is left of a group after STOP_GRACE is killed.  A run's worker kills what its run left
        in its group as soon as the run itself ends -- a process that never heard the Ctrl-C too."""
        with self.lock:
            self.stopping.set()
            children = list(self.children.values())
            for proc in children:
                proc.signal_group(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE
        for proc in children:
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        with self.lock:
            for proc in children:
                proc.signal_group(signal.SIGKILL)  # a no-op once its worker has reaped it

    def go(self) -> Series:
        series = self.series
        self.started = time.monotonic()
        burners = start_burners(series.burn, series.seed, self.scratch)
        threads = [threading.Thread(target=self.worker, args=(FIRST_SLOT + i,), daemon=True)
                   for i in range(series.parallel)]
        try:
            for thread in threads:
                thread.start()
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(0.2)
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or TERM (checks/__main__ makes it SystemExit)
            series.stopped = True
            print(t("\nstopping: the runs under way are being ended; no new run starts"), file=self.stream,
                  flush=True)
            self.stop_children()
            for thread in threads:
                thread.join(STOP_GRACE + 5)
        finally:
            for proc in burners:
                proc.stop(grace=1)
            series.wall = time.monotonic() - self.started
            _remove_tree(self.scratch)
        return series


def _remove_tree(path: Path) -> None:
    from checks import boxfiles
    try:
        boxfiles.remove(path)
    except OSError:
        pass  # a scratch folder under /tmp: the next boot clears what could not go now


def read_report(run: Run, output: str) -> list[dict]:
    """The run's tests, from its own report; no report, or one out of shape, is one error for the whole
    run with the runner's last words — never a pass."""
    try:
        tests = json.loads(run.report.read_text(encoding="utf-8"))["tests"]
        if not isinstance(tests, list) or not all(isinstance(x, dict) and isinstance(x.get("id"), str) for x in tests):
            raise ValueError("tests out of shape")
    except (OSError, ValueError, KeyError, TypeError):
        tests = []
    if not tests:
        tail = output.strip().splitlines()[-10:]
        tests = [{"id": f"{run.lesson}.*", "lesson": run.lesson, "status": "error",
                  "message": t("no report (exit {code})", code=run.exit_code), "output": "\n".join(tail)}]
    return tests


# ---------------------------------------------------------------- what the runs say, per check

VARYING = [  # what differs from run to run in one failure's words: ids, tokens, paths, and every number
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b"), "…"),
    (re.compile(r"(/[\w.+-]+)+/"), "…/"),
    (re.compile(r"\d+"), "#"),
]


def message_key(message: str) -> str:
    """Failures that differ only in numbers, ids or paths are one failure (`counts={'done': 16}` and
    `counts={'done': 11}` are the same lost update); the table shows the first run's words."""
    for pattern, stand_in in VARYING:
        message = pattern.sub(stand_in, message)
    return message.strip()


@dataclass
class Failure:
    message: str                     # the first run's words
    runs: list[int] = field(default_factory=list)
    wordings: set[str] = field(default_factory=set)  # every run's exact words (numbers differ)


def classify(passed: int, failed: int, not_tried: int) -> str:
    """What a check's counts over a series' runs make it (not_tried: runs it was skipped in, or not run in at
    all) -- the one place a check is named, for the terminal table, repeat.json and the page alike.  flaky:
    passed some runs, failed others; failed / passed: did so in every run of the series; skipped: tried in
    none; partial: tried in some runs only (an exercise skipped in 16 runs and failed in 4 did not fail
    every run)."""
    if passed and failed:
        return "flaky"
    if not passed and not failed:
        return "skipped"
    if not_tried:
        return "partial"
    return "failed" if failed else "passed"


def counts_text(passed: int, failed: int, skipped: int, not_run: int = 0) -> str:
    """A check's counts in words: "passed 16, failed 4 (attempted in 20 of 20 runs)", "failed 4, skipped 16
    (attempted in 4 of 20 runs)"."""
    parts = [t("passed {n}", n=passed) if passed else "", t("failed {n}", n=failed) if failed else "",
             t("skipped {n}", n=skipped) if skipped else "", t("not run {n}", n=not_run) if not_run else ""]
    return t("{counts} (attempted in {attempts} of {runs} runs)", counts=listed([p for p in parts if p]),
             attempts=passed + failed, runs=passed + failed + skipped + not_run)


@dataclass
class CheckTally:
    id: str
    lesson: str
    regression: bool
    text: dict
    passed: list[int] = field(default_factory=list)   # run numbers
    failed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    not_run: list[int] = field(default_factory=list)  # runs of its lesson whose report did not have it
    failures: dict[str, Failure] = field(default_factory=dict)
    tests: dict[int, dict] = field(default_factory=dict)  # run number -> that run's test dict

    @property
    def attempts(self) -> int:
        return len(self.passed) + len(self.failed)

    @property
    def runs(self) -> int:
        """The runs of its lesson in the series: attempted, skipped or not run."""
        return self.attempts + len(self.skipped) + len(self.not_run)

    @property
    def kind(self) -> str:
        return classify(len(self.passed), len(self.failed), len(self.skipped) + len(self.not_run))

    @property
    def counts(self) -> str:
        return counts_text(len(self.passed), len(self.failed), len(self.skipped), len(self.not_run))


KIND_ORDER = {"flaky": 0, "failed": 1, "partial": 2, "passed": 3, "skipped": 4}


def tally(runs: list[Run]) -> list[CheckTally]:
    """One tally per check, flaky first, then steady failures, then checks tried in some runs only (those
    that failed there first), then passes; in check order within each.  A check missing from a run of its
    lesson (a run that wrote no report) counts as not run there: it neither passed nor failed."""
    found: dict[tuple, CheckTally] = {}
    numbers: dict[str, set[int]] = {}
    for run in sorted(runs, key=lambda r: (r.lesson, r.number)):
        numbers.setdefault(run.lesson, set()).add(run.number)
        for test in run.tests:
            key = (test["id"], bool(test.get("regression")), run.lesson)
            row = found.setdefault(key, CheckTally(test["id"], run.lesson, bool(test.get("regression")),
                                                   test.get("text") or {}))
            row.tests[run.number] = test
            if failed(test):
                row.failed.append(run.number)
                words = test.get("message") or str(test.get("status"))
                failure = row.failures.setdefault(message_key(words), Failure(words))
                failure.runs.append(run.number)
                failure.wordings.add(words)
            elif test.get("status") == PASS:
                row.passed.append(run.number)
            else:
                row.skipped.append(run.number)
    rows = list(found.values())
    for row in rows:
        row.not_run = sorted(numbers[row.lesson] - row.tests.keys())
    order = {key: i for i, key in enumerate(found)}
    return sorted(rows, key=lambda r: (KIND_ORDER[r.kind], not r.failed, order[(r.id, r.regression, r.lesson)]))


# ---------------------------------------------------------------- evidence for the terminal

def squeeze(line: str, most: int = 240) -> str:
    """One line of at most `most` characters, cut in the middle if it must be: its head and its end."""
    if len(line) <= most:
        return line
    head = most // 3
    return line[:head] + "…" + line[len(line) - (most - head - 1):]


def keep_cause(text: str | None, most_lines: int = 8, most: int = 240) -> list[str]:
    """A message or a run's notes, for the terminal (the whole of it is in repeat.json and the page): cut in
    the middle if it must be, never at its end -- its first line, "…", then its last lines, where a
    traceback's exception, an assertion or a check's finding is."""
    lines = [line.rstrip() for line in re.sub(r"\A\s*\n", "", (text or "").rstrip()).splitlines()]
    if len(lines) > most_lines:
        lines = [lines[0], "…", *lines[len(lines) - max(most_lines - 2, 1):]]
    return [squeeze(line, most) for line in lines]


def one_line(message: str | None, most: int = 240) -> str:
    """A message as one line (a run's progress): its first line and, if it has more, its last -- the
    cause -- with "…" between; cut in the middle if still too long."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines:
        return ""
    return squeeze(lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}", most)


def run_list(numbers: list[int], most: int = 12) -> str:
    shown = ", ".join(str(n) for n in numbers[:most])
    return shown + (t(" … ({more} more)", more=len(numbers) - most) if len(numbers) > most else "")


def evidence_pair(row: CheckTally) -> tuple[tuple[int, dict], tuple[int, dict]] | None:
    """One failing run and one passing run of a flaky check (the first of each)."""
    if row.kind != "flaky":
        return None
    return (row.failed[0], row.tests[row.failed[0]]), (row.passed[0], row.tests[row.passed[0]])


def print_table(series: Series, rows: list[CheckTally], stream=sys.stdout) -> None:
    out = lambda text="": print(text, file=stream)  # noqa: E731 - one short name for many lines
    done = len(series.runs)
    out()
    if series.stopped:
        out(t("stopped after {done} of {planned} runs: the table counts the finished runs only", done=done,
              planned=series.planned))
    out(t("{done} runs in {wall:.0f}s (seed {seed}: SEED={seed} replays these conditions)", done=done,
          wall=series.wall, seed=series.seed))
    titles = {"flaky": t("FLAKY IN YOUR CODE — passed some runs, failed others (a race or a timing assumption; "
                         "luck decides)"),
              "failed": t("FAILED EVERY RUN"),
              "partial": t("ATTEMPTED IN SOME RUNS ONLY — skipped or not run in the others"),
              "passed": t("PASSED EVERY RUN"), "skipped": t("NOT ATTEMPTED (skipped every run)")}
    for kind in KIND_ORDER:
        chosen = [row for row in rows if row.kind == kind]
        if not chosen:
            continue
        out()
        out(titles[kind])
        for row in chosen:
            name = row.id + (t(" (regression)") if row.regression else "")
            out(t("  {name:<18} {counts}", name=name, counts=row.counts))
            for failure in sorted(row.failures.values(), key=lambda f: -len(f.runs)):
                first, *rest = keep_cause(failure.message, most_lines=6) or [""]
                out(t("      {count}× {message}", count=len(failure.runs), message=first))
                for line in rest:
                    out(f"         {line}")
                if len(failure.wordings) > 1:
                    out(t("         (its numbers differ between runs: {n} wordings, each in repeat.json)",
                          n=len(failure.wordings)))
                out(t("         runs {runs}", runs=run_list(failure.runs)))
            pair = evidence_pair(row)
            if pair:
                (bad_no, bad), (good_no, good) = pair
                out(t("      evidence: run {bad_no} failed, run {good_no} passed", bad_no=bad_no, good_no=good_no))
                for label, test in ((f"run {bad_no} ✗", bad), (f"run {good_no} ✓", good)):
                    out(f"        {label}")
                    for line in keep_cause(test.get("output")) or [t("(no notes)")]:
                        out(f"          | {line}")


def to_dict(series: Series, rows: list[CheckTally]) -> dict:
    return {
        "lessons": series.lessons, "times": series.times, "parallel": series.parallel, "burn": series.burn,
        "seed": series.seed, "source": str(series.lab) if series.lab else "reference",
        "planned_runs": series.planned, "finished_runs": len(series.runs), "stopped": series.stopped,
        "wall_seconds": round(series.wall, 1),
        "checks": [{"id": r.id, "lesson": r.lesson, "regression": r.regression, "kind": r.kind,
                    "passed": len(r.passed), "failed": len(r.failed), "skipped": len(r.skipped),
                    "not_run": len(r.not_run), "attempts": r.attempts, "runs": r.runs, "passed_runs": r.passed,
                    "failed_runs": r.failed, "skipped_runs": r.skipped, "not_run_runs": r.not_run,
                    "failures": [{"message": f.message, "count": len(f.runs), "runs": f.runs,
                                  "wordings": sorted(f.wordings)}
                                 for f in r.failures.values()]} for r in rows],
        "runs": [{"lesson": r.lesson, "number": r.number, "slot": r.slot, "seconds": round(r.seconds, 1),
                  "exit_code": r.exit_code, "report": str(r.report)} for r in series.runs],
    }


def exit_code(series: Series, rows: list[CheckTally]) -> int:
    if series.stopped:
        return 130
    return 1 if any(row.failed for row in rows) else 0


def repeat(lessons: list[str], times: int, parallel: int, burn: int, out: Path, lab: Path | None = None,
           seed: int | None = None, command=checker_command, stream=sys.stdout) -> tuple[Series, list[CheckTally]]:
    """Run the series, print its table, write out/repeat.json and out/index.html."""
    if not 1 <= parallel <= MAX_PARALLEL:
        raise ValueError(t("PARALLEL must be 1 to 7 (each parallel run takes an isolation slot)"))
    if times < 1 or burn < 0:
        raise ValueError(t("REPEAT must be 1 or more and BURN 0 or more"))
    series = Series(lessons, times, parallel, burn, new_seed() if seed is None else seed, lab)
    print(t("lesson {lessons} × {times} runs of {source}, {parallel} side by side, {burn} CPU burners; seed {seed} "
            "(SEED={seed} replays these conditions)", lessons=", ".join(lessons), times=times,
            source=lab or t("the reference"), parallel=parallel, burn=burn, seed=series.seed),
          file=stream, flush=True)
    Runner(series, out, command, stream).go()
    rows = tally(series.runs)
    print_table(series, rows, stream)
    out.mkdir(parents=True, exist_ok=True)
    (out / "repeat.json").write_text(json.dumps(to_dict(series, rows), ensure_ascii=False, indent=2) + "\n",
                                     encoding="utf-8")
    from checks import repeat_page
    repeat_page.write(out / "index.html", series, rows)
    print(t("\ntable: {html} · JSON: {json}", html=out / "index.html", json=out / "repeat.json"), file=stream)
    return series, rows
