"""Mutants: a lesson's reference files with one plausible mistake each.

Each tests/mutants/lessonNN.py defines MUTANTS, a list of Mutant.  A mutant
replaces `old` by `new` in `file` (old must occur exactly once) and names the
check ids that must then fail — exactly those, no others — and, with `says`, the words a failing check
must show, so no rewrite quietly turns a precise diagnosis into a vague one.  A mutant with `on="NN"` breaks lesson NN's
folder and names checks of an earlier lesson: they must fail as regressions (tests/mutants/regressions.py).

`make test` runs the cover — a small set of mutants (chosen greedily) that between them fail every check
any mutant fails, so every run proves every check can fail — plus a daily share of the rest; `make
test-all` runs them all.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    fails: tuple[str, ...]
    why: str = ""
    on: str = ""  # the lesson whose folder it breaks, when its checks are an earlier lesson's (regressions)
    slow: bool = False  # its failure shows only when a bound runs out (15–45 s): see cover() and for_today()
    says: tuple[tuple[str, str], ...] = ()  # (check, a phrase the learner must read in its message or evidence)
    hints: tuple[tuple[str, str], ...] = ()  # (check, a phrase of the hint for this cause: shared.tap.Because)

    @property
    def lesson(self) -> str:
        return self.on or self.fails[0].split(".")[0]

    def apply(self, workdir: Path) -> None:
        path = workdir / self.file
        text = path.read_text(encoding="utf-8")
        count = text.count(self.old)
        assert count == 1, f"mutant {self.name}: expected the old text once in {self.file}, found {count}"
        path.write_text(text.replace(self.old, self.new), encoding="utf-8")


def all_mutants() -> list[Mutant]:
    found = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name.startswith("lesson") or info.name == "regressions":
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.extend(module.MUTANTS)
    return found


def assert_fails_as_pinned(mutant: Mutant, shown: dict[str, tuple[str, str, str]], said: dict) -> None:
    """What a run with this mutant must show, whoever ran it (tests/test_mutants.py runs only its checks,
    tests/test_learner_walk.py the whole lesson as a learner does): each check it names failed, and says
    its pinned phrases (tests/mutants/pin.py) and its hints.  `shown`: check id -> (status, the message with
    its evidence, the English hint)."""
    from checks.results import NOT_PASSED
    not_failed = {c: shown[c][0] if c in shown else "not run" for c in mutant.fails
                  if c not in shown or shown[c][0] not in NOT_PASSED}
    assert not not_failed, f"{mutant.why}\nnot failed: {not_failed}\n{shown}"
    for check_id, phrase in [*mutant.says, *said.get(mutant.name, {}).items()]:
        assert phrase in shown[check_id][1], f"{check_id} no longer says {phrase!r}:\n{shown[check_id][1]}"
    for check_id, phrase in mutant.hints:  # the hint for this cause, in place of the check's general one
        assert phrase in shown[check_id][2], f"{check_id}'s hint is not this cause's:\n{shown[check_id][2]}"


def failed_pairs(mutant: Mutant) -> set[tuple[str, str]]:
    """The (lesson run, check) pairs this mutant must fail."""
    return {(mutant.lesson, check) for check in mutant.fails}


def cover(mutants: list[Mutant]) -> list[Mutant]:
    """Greedy: take the mutant that fails the most (lesson run, check) pairs not yet failed — a slow one
    counting as a quarter as many, so it is taken only where no quick one fails the same — until none is
    left.  Ties go to the one defined first, so the cover is the same on every machine."""
    left = set().union(*map(failed_pairs, mutants))
    chosen: list[Mutant] = []
    while left:
        best = max(mutants, key=lambda m: len(failed_pairs(m) & left) / (4 if m.slow else 1))
        chosen.append(best)
        left -= failed_pairs(best)
    return chosen


ROTATION = 4  # days: a mutant outside the cover runs in make test one day in four


def for_today(mutants: list[Mutant]) -> list[Mutant]:
    """The cover, and today's share of the others: the slow ones dealt out first, so no day gets them all."""
    from tests.daily import share
    core = cover(mutants)
    rest = sorted((m for m in mutants if m not in core), key=lambda m: not m.slow)  # stable: file order kept
    today = set(core) | set(share(rest, ROTATION))
    return [m for m in mutants if m in today]
