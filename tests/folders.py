"""Learner folders for tests: the kit's reference as a learner would have typed it."""

from __future__ import annotations

from pathlib import Path

from checks.workdir import materialise, verifier_files
from shared import manifest


def learner_folder(dest: Path, lesson_id: str = "01") -> Path:
    """`dest` holding the reference's files after lesson `lesson_id`, without the kit's verifiers."""
    data = manifest.load()
    lesson = manifest.lesson(lesson_id, data)
    lab = materialise(data["lessons"], lesson, dest)
    for verifier in verifier_files(lesson):
        (lab / verifier.name).unlink()
    return lab
