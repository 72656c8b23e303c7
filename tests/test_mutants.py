"""Every check can fail: each mutant makes the checks it names fail.

A mutant run executes only the checks it names (`only=`): the reference run in test_lessons.py
already proves every check passes on the unbroken files, so re-running the others under each
mutant would only cost time.  Checks are written to be independent of one another for this.

`make test` runs the cover (every check any mutant fails is failed by one of them, every run) and a
daily quarter of the others; `make test-all` runs every mutant (tests/mutants/__init__.py, tests/daily.py).
A mutant that tests/test_learner_walk.py walks today is proved there, on a whole run of its lesson, with
the same assertions (assert_fails_as_pinned): it is not run twice."""

import pytest

from checks.results import NOT_PASSED
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests.mutants import all_mutants, assert_fails_as_pinned, for_today
from tests.mutants.pin import load as load_said
from tests.test_learner_walk import walked_today

DATA = manifest.load()
SAID = load_said()
READY = {lesson["id"] for lesson in DATA["lessons"] if lesson["status"] == "ready"}
MUTANTS = [m for m in for_today([m for m in all_mutants() if m.lesson in READY])  # planned lessons: being built
           if m.name not in walked_today()]


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
    assert_fails_as_pinned(mutant, {c.id: (c.status, "\n".join([c.message or "", *c.notes]), c.hint["en"])
                                    for c in result.checks}, SAID)
