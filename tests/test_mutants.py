"""Every check can fail: each mutant makes the checks it names fail.

A mutant run executes only the checks it names (`only=`): the reference run in test_lessons.py
already proves every check passes on the unbroken files, so re-running the others under each
mutant would only cost time.  Checks are written to be independent of one another for this.

`make test` runs the cover (every check any mutant fails is failed by one of them, every run) and a
daily quarter of the others; `make test-all` runs every mutant (tests/mutants/__init__.py, tests/daily.py)."""

import pytest

from checks.results import NOT_PASSED
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests.mutants import all_mutants, for_today
from tests.mutants.pin import load as load_said

DATA = manifest.load()
SAID = load_said()
READY = {lesson["id"] for lesson in DATA["lessons"] if lesson["status"] == "ready"}
MUTANTS = for_today([m for m in all_mutants() if m.lesson in READY])  # planned lessons are still being built


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.lesson}-{m.name}")
def test_mutant_fails_exactly_its_checks(mutant, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")  # the pinned words are the English ones
    lesson = manifest.lesson(mutant.lesson, DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    mutant.apply(work)
    result = run_lesson(lesson, work, tmp_path / "logs", only=set(mutant.fails))
    failed = sorted(c.id for c in result.checks if c.status in NOT_PASSED)
    details = {c.id: (c.status, c.message) for c in result.checks if c.status != "pass"}
    assert failed == sorted(mutant.fails), f"{mutant.why}\n{details}"
    by_id = {c.id: c for c in result.checks}
    pinned = [*mutant.says, *SAID.get(mutant.name, {}).items()]
    for check_id, phrase in pinned:  # the diagnosis the learner reads, pinned (tests/mutants/pin.py)
        shown = "\n".join([by_id[check_id].message, *by_id[check_id].notes])
        assert phrase in shown, f"{check_id} no longer says {phrase!r}:\n{shown}"
    for check_id, phrase in mutant.hints:  # the hint for this cause, in place of the check's general one
        assert phrase in by_id[check_id].hint["en"], f"{check_id}'s hint is not this cause's:\n{by_id[check_id].hint}"
