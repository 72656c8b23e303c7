"""Mutants: a lesson's reference files with one plausible mistake each.

Each tests/mutants/lessonNN.py defines MUTANTS, a list of Mutant.  A mutant
replaces `old` by `new` in `file` (old must occur exactly once) and names the
check ids that must then fail — exactly those, no others.  A mutant with `on="NN"` breaks lesson NN's
folder and names checks of an earlier lesson: they must fail as regressions (tests/mutants/regressions.py).
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
