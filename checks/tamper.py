"""A look through a learner's folder for code that reaches into the checker instead of doing the lesson.

Some checks must import the learner's code into the process that judges it (white-box checks: a probe
wraps the learner's task to count its attempts).  Code running there could in principle find the
checker's objects and bend them.  The verdict channel (checks/verdicts.py) and the checker's own
integrity test (shared/tap.py `_intact`) catch the direct ways; this scan catches the preparation: a
folder that names the kit's modules, the verdict channel, or the introspection needed to reach into
another frame or process.  Nothing in the course needs any of these, so a hit is reported as
"tampering suspected" and the folder's checks are errors, never passes.

This is a tripwire, not a proof: obfuscated code can hide from a scan.  README.md ("Grading safely")
states the residual risk.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from shared.i18n import t

PATTERNS = {
    r"\b(?:from|import)\s+(?:shared|checks)\b": "imports the kit's own modules",
    r"\bshared\.tap\b|\b_Check\b|\bmain_guard\b|\b_emit\b|\b_intact\b": "names the checker's internals",
    r"TASKLAB_VERDICT|TASKLAB_RUN_ID|verdicts\.py|\bSigner\b": "names the verdict channel",
    r"\bsys\.modules\s*\[|\bsys\._getframe\b|\bf_back\b|\bf_globals\b|\bf_locals\b|\b__closure__\b|\bgc\.get_(?:objects|referrers|referents)\b":
        "reaches into other modules' or frames' objects",
    r"/proc/(?:self|\d+|\{)[^\"']*/(?:mem|fd|environ)|\bptrace\b|\bctypes\b":
        "reaches into process memory or file descriptors",
}
COMPILED = [(re.compile(pattern), why) for pattern, why in PATTERNS.items()]
SKIP_PARTS = {".venv", "venv", "__pycache__", ".git", ".state", ".lab", "node_modules"}


@dataclass
class Finding:
    file: str
    line: int
    why: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.why}: {self.text}"


@functools.lru_cache(maxsize=1)
def _kit_digests() -> frozenset[str]:
    """The kit's own Python files: a learner who copied a lesson folder with its verifiers/ brings these
    along unchanged, and an unchanged copy of the kit's code changes nothing."""
    from shared.manifest import KIT_ROOT
    found = set()
    for pattern in ("lessons/*/verifiers/*.py", "shared/*.py", "checks/*.py"):
        for path in KIT_ROOT.glob(pattern):
            found.add(hashlib.sha256(path.read_bytes()).hexdigest())
    return frozenset(found)


def scan(folder: Path, limit: int = 10) -> list[Finding]:
    """Findings in the folder's Python files (and .pth files, which Python runs at start-up)."""
    found: list[Finding] = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if SKIP_PARTS & set(rel.parts) or not path.is_file() or path.suffix not in (".py", ".pth"):
            continue
        with contextlib.suppress(OSError):
            if hashlib.sha256(path.read_bytes()).hexdigest() in _kit_digests():
                continue
        if path.suffix == ".pth":
            found.append(Finding(rel.as_posix(), 1, t("a .pth file (Python runs it at start-up)"), ""))
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            for pattern, why in COMPILED:
                if pattern.search(line):
                    found.append(Finding(rel.as_posix(), number, why, line.strip()[:120]))
                    break
            if len(found) >= limit:
                return found
    return found


def message(findings: list[Finding]) -> str:
    first = findings[0]
    return t("tampering suspected: {first} ({n_findings} in all). The course needs none of this; remove it and check "
             "again", first=first, n_findings=len(findings))
