"""The kit's promise that a diagnosis points at the mistake made (issue 23): lessons 09–16, each a folder
typed from the kit's reference with one typical mistake, checked the way a learner checks it
(`python -m checks run NN --lab DIR`, in English).  For each: the first failure the learner reads is the
expected check (or the one problem said above the checks), a phrase in it names the cause, and no check
is shown blocked by another file than the one the mistake is in.

(The course's own code cannot ship in the kit; the opt-in curriculum tests walk that.  The reference with
one mistake is the same shape of folder.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared import manifest
from tests.folders import learner_folder
from tests.mutants import all_mutants

KIT = manifest.KIT_ROOT
MUTANTS = {m.name: m for m in all_mutants()}

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
FAILURE = re.compile(r"^  [✗!⏱] (?:(\d\d\.\d+)\s|(?!\d\d\.))")


def _check_as_a_learner(tmp_path: Path, name: str) -> str:
    mutant = MUTANTS[name]
    lab = learner_folder(tmp_path / "tasks_lab", mutant.lesson)
    mutant.apply(lab)
    run = subprocess.run([sys.executable, "-m", "checks", "run", mutant.lesson, "--lab", str(lab)], cwd=KIT,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
    assert run.returncode == 1, run.stdout + run.stderr
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
