"""Pin what each mutant's failing checks say (like CodeCrafters' tester fixtures): tests/mutants/said.json.

    .venv/bin/python -m tests.mutants.pin [NN ...]      run the mutants (of those lessons), record the words

For every check a mutant fails, said.json keeps one phrase of the English message the learner reads: the
message's leading words up to the first detail that varies from run to run (a number, an id, a quoted
value).  tests/test_mutants.py asserts that phrase is still shown, and tests/test_manifest.py that every
mutant's every failing check has one, so no rewrite can quietly turn a precise diagnosis into a vague
one.  A phrase written by hand in a mutant's `says` is kept as well; re-pinning a lesson replaces its
entries in said.json, so a changed diagnosis is a reviewed change of this file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SAID = Path(__file__).with_name("said.json")
VARIES = re.compile(r"[0-9'\"`{\[<(]|\b[0-9a-f]{8}\b|https?://|/tmp/|\.state/")
MIN_WORDS = 10  # characters: less says too little to pin
GOOD = 24       # leading words this long are the phrase; shorter ones give way to a longer stretch


def phrase(message: str) -> str | None:
    """Words of the message's first line that do not vary from run to run: its leading words up to the
    first varying detail, or else its longest stretch between two; None if nothing long enough."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    parts = VARIES.split(line)
    head = _whole_words(parts[0], cut=len(parts) > 1)
    if len(head) >= GOOD:
        return head
    stretches = [_whole_words(p, cut=i < len(parts) - 1, start=True) for i, p in enumerate(parts) if i]
    best = max([head, *stretches], key=len)
    return best if len(best) >= MIN_WORDS else None


def _whole_words(text: str, cut: bool, start: bool = False) -> str:
    """Trimmed to whole words (a stretch cut out of a line may begin or end inside a word)."""
    text = text[:120]
    if (cut or len(text) == 120) and not text[-1:].isspace() and " " in text:
        text = text[:text.rfind(" ")]
    if start and not text[:1].isspace() and " " in text:
        text = text[text.find(" ") + 1:]
    return text.strip(" :,;—-.")


def load() -> dict[str, dict[str, str]]:
    return json.loads(SAID.read_text(encoding="utf-8")) if SAID.exists() else {}


def _run(mutant) -> tuple[str, dict[str, str]]:
    from checks.results import NOT_PASSED
    from checks.runner import run_lesson
    from checks.workdir import materialise
    from shared import manifest
    data = manifest.load()
    lesson = manifest.lesson(mutant.lesson, data)
    with tempfile.TemporaryDirectory() as tmp:
        work = materialise(data["lessons"], lesson, Path(tmp) / "work")
        mutant.apply(work)
        result = run_lesson(lesson, work, Path(tmp) / "logs", only=set(mutant.fails))
    said = {}
    for check in result.checks:
        if check.status in NOT_PASSED and check.id in mutant.fails:
            found = phrase(check.message) or next((p for p in map(phrase, check.notes) if p), None)
            if found:
                said[check.id] = found
    return mutant.name, said


def main(lessons: list[str]) -> int:
    os.environ["LAB_LANG"] = "en"
    from tests.mutants import all_mutants
    chosen = [m for m in all_mutants() if not lessons or m.lesson in lessons]
    said = load()
    with ProcessPoolExecutor(max_workers=int(os.environ.get("PIN_WORKERS", "3"))) as pool:
        for name, found in pool.map(_run, chosen):
            said[name] = dict(sorted(found.items()))
            print(f"{name}: {found}", flush=True)
    SAID.write_text(json.dumps(dict(sorted(said.items())), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
