"""Every check passes alone: run by itself (only=that id) against the reference, it passes.

Mutant runs execute only the checks they name, so a check that leaned on what an earlier check left
behind would give a mutant run a false verdict.  `make test` runs a rotating sample (one check per lesson,
a different one each day); `make test-all` (LAB_TEST_ALL=1) runs every check of every lesson alone.
"""

import pytest

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests.daily import EVERYTHING, today

DATA = manifest.load()
READY = [lesson for lesson in DATA["lessons"] if lesson["status"] == "ready"]


def _chosen() -> list[tuple[dict, str]]:
    if EVERYTHING:
        return [(lesson, c["id"]) for lesson in READY for c in lesson["checks"]]
    return [(lesson, lesson["checks"][today() % len(lesson["checks"])]["id"]) for lesson in READY]


@pytest.mark.parametrize("lesson,check_id", _chosen(), ids=lambda v: v if isinstance(v, str) else "")
def test_check_passes_alone_on_the_reference(lesson, check_id, tmp_path):
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    result = run_lesson(lesson, work, tmp_path / "logs", only={check_id})
    [check] = [c for c in result.checks if c.id == check_id]
    assert check.status == PASS, f"{check_id} alone: {check.status}: {check.message}\n" + "\n".join(check.notes)
    assert all(c.status == "skipped" for c in result.checks if c.id != check_id)
