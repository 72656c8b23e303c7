"""The kit's promise that a diagnosis points at the mistake made (issue 23): lessons 09–16, each a folder
typed from the kit's reference with one typical mistake, checked the way a learner checks it
(`python -m checks run NN --lab DIR`, in English).  For each: the first failure the learner reads is the
expected check (or the one problem said above the checks), a phrase in it names the cause, and no check
is shown blocked by another file than the one the mistake is in.

(The course's own code cannot ship in the kit; the opt-in curriculum tests walk that.  The reference with
one mistake is the same shape of folder.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared import manifest
from tests.daily import share
from tests.folders import learner_folder
from tests.mutants import all_mutants, assert_fails_as_pinned
from tests.mutants.pin import load as load_said

KIT = manifest.KIT_ROOT
MUTANTS = {m.name: m for m in all_mutants()}
SAID = load_said()

# mutant (the learner's mistake) -> (the check read first, a phrase of its cause)
WALK = {
    "09-task-acks-early": ("09.4", "it needs task_acks_late plus task_reject_on_worker_lost"),
    "10-no-budget-check": ("10.6", "compare time.time() + delay + 0.1 with the deadline"),
    "11-finish-by-id-only": ("11.3", "a foreign token finished the job: compare lease_token"),
    "12-submitter-still-delays": ("12.1", "failing means it still sends a message"),
    "13-admission-compares-with-greater": ("problem", "refuse when count >= limit"),
    "14-slot-per-hour": ("14.5", "the slot name must carry the minute of execution"),
    "15-claim-ignores-backoff": ("15.5", "claim need next_attempt_at<=NOW(6)"),
    "16-claim-ignores-backoff": ("16.1", "duplicates and claims during the backoff must neither claim nor raise"),
    "16-log-database-url": ("16.6", "a password or a connection URL with its password"),
    "16-slot-per-hour": ("problem", "the slot name in schedule_tasks.py does not carry the minute"),
}
# Lessons 04-08 (issue 41): mistake -> (the check read first, a phrase of its diagnosis, a phrase of the hint
# under it, which is about this cause).  A third of them each day under make test (tests/daily.py).
WALK_0408 = {
    "04-done-counted-outside-lock": ("04.1", "increments to counts were lost", "outside it loses"),
    "04-one-sentinel": ("04.2", "", "send one None per thread"),
    "04-sleep-inside-lock": ("04.3", "", "keep only the counter updates in the lock"),
    "05-blocking-call-in-coroutine": ("05.4", "a blocking call in the event loop", "Inside async def, a blocking call"),
    "05-pool-never-shut-down": ("05.2", "the pool was never shut down", "Create the pool with `with ThreadPool"),
    "06-results-in-worker-global": ("06.1", "has its own copy of every global", "Processes share no memory"),
    "06-counter-across-processes": ("06.3", "a module global that a function changes", "Processes share no memory"),
    "06-export-no-guard": ("06.1", "guard is missing", "Build the pool only inside main()"),
    "06-lambda-target": ("06.1", "a lambda or a function defined inside another function",
                         "Define the function the pool runs at the top level"),
    "07-cpu-on-threads": ("07.1", "the GIL serialises it", "Pure-Python CPU work holds the GIL"),
    "07-cpu-on-asyncio": ("07.1", "on the event loop it never awaits", "asyncio only interleaves work that waits"),
    "07-blocking-sdk-on-asyncio": ("07.1", "", "A blocking call (a synchronous SDK) on the event loop"),
    "08-include-missing": ("08.2", "it never imported export_tasks", "A worker knows only the modules"),
    "08-task-without-stable-name": ("08.2", "registered under another name", "Name the task in its decorator"),
    "08-prepare-results-on-broker-db": ("08.6", "CELERY_RESULT_BACKEND in .env.tasks is",
                                        "prepare_broker.py writes both URLs from one template"),
}
FAILURE = re.compile(r"^  [✗!⏱] (?:(\d\d\.\d+)\s|(?!\d\d\.))")


def walked_today() -> set[str]:
    """The mutants walked under today's make test whose checks run (not those a problem above the checks
    blocks, which a run of their checks alone shows otherwise): tests/test_mutants.py leaves them to these
    tests, which assert the same of them on a whole run (assert_fails_as_pinned)."""
    walked = [name for name, said in WALK.items() if said[0] != "problem"] + share(list(WALK_0408), 3)
    return {name for name in walked if not MUTANTS[name].on}


def _check_as_a_learner(tmp_path: Path, name: str) -> str:
    """What the learner reads; and, on the same run, what tests/test_mutants.py asserts of this mutant."""
    mutant = MUTANTS[name]
    lab = learner_folder(tmp_path / "tasks_lab", mutant.lesson)
    mutant.apply(lab)
    report = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "checks", "run", mutant.lesson, "--lab", str(lab),
                          "--report", str(report)], cwd=KIT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
    assert run.returncode == 1, run.stdout + run.stderr
    tests = [test for test in json.loads(report.read_text())["tests"] if not test["regression"]]
    if name in walked_today():
        assert_fails_as_pinned(mutant, {test["id"]: (test["status"], "\n".join(filter(None, [
            test["message"], test["output"]])), (test["hint"] or {}).get("en", "")) for test in tests}, SAID)
    return run.stdout


@pytest.mark.parametrize("name", WALK)
def test_the_first_failure_a_learner_reads_names_the_mistake(tmp_path, name):
    expected, phrase = WALK[name]
    out = _check_as_a_learner(tmp_path, name)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if FAILURE.match(line))
    shown = FAILURE.match(lines[first]).group(1) or "problem"
    read_first = "\n".join(lines[first:first + 2])
    assert shown == expected and phrase in read_first, f"first failure read:\n{read_first}\n\n{out}"
    blamed = set(re.findall(r"BLOCKED \(([^)]+)\)", out)) | set(re.findall(r"fix (\S+\.(?:py|sql)) first", out))
    assert blamed <= {MUTANTS[name].file}, f"another file blamed: {blamed}\n{out}"


@pytest.mark.parametrize("name", share(list(WALK_0408), 3))
def test_lessons_04_to_08_the_first_failure_names_the_mistake_and_its_hint_is_about_it(tmp_path, name):
    expected, phrase, hint = WALK_0408[name]
    out = _check_as_a_learner(tmp_path, name)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if FAILURE.match(line))
    read_first = "\n".join(lines[first:first + 2])
    assert FAILURE.match(lines[first]).group(1) == expected and phrase in read_first, \
        f"first failure read:\n{read_first}\n\n{out}"
    under = next(line for line in lines[first:] if line.strip().startswith("hint:"))
    assert hint in under, f"the hint under {expected} is about another cause:\n{under}\n\n{out}"
