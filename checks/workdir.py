"""Build the folder a check runs in: the reference after lesson NN, or a copy of a learner's folder."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from shared.manifest import KIT_ROOT
from shared.state import state_root

# Work folders, logs and progress (.state/). LAB_HOME moves them (tests give each run its own).
STATE_DIR = Path(os.environ.get("LAB_HOME") or state_root())
NOT_LESSON_FILES = {"README.md", "verifiers", "__pycache__"}
# What never comes along from a learner's folder: environments, caches, VCS data.
COPY_IGNORE = shutil.ignore_patterns(".venv", "venv", "__pycache__", "*.pyc", ".git", ".state", ".lab",
                                    ".pytest_cache", "node_modules", ".mypy_cache", ".ruff_cache")


class UsageError(Exception):
    """Bad input from the command line: exit code 2 with this message."""


def disk_full(exc: OSError) -> str | None:
    """Where the disk filled up, if that is what `exc` says (a copy names its target; shutil.Error lists
    each file it could not copy, as text), else None.  A full disk is this machine's state: never a
    learner's error, nor a bug."""
    full = (errno.ENOSPC, errno.EDQUOT)
    if exc.errno in full:
        where = exc.filename2 or exc.filename  # a name opened relative to a folder (intake's) says little: the state's
        return str(where) if isinstance(where, str) and os.path.isabs(where) else str(STATE_DIR)
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        for entry in exc.args[0]:
            if len(entry) == 3 and any(f"[Errno {number}]" in str(entry[2]) for number in full):
                return str(entry[1])
    return None


def lesson_files(lesson: dict) -> dict[str, Path]:
    """Relative path -> file, for every lesson file of one lesson folder (not its guide or verifiers)."""
    folder = KIT_ROOT / lesson["folder"]
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if rel.parts[0] in NOT_LESSON_FILES or "__pycache__" in rel.parts or not path.is_file():
            continue
        found[rel.as_posix()] = path
    return found


def reference_files(lessons: list[dict], upto: str) -> dict[str, Path]:
    """The learner's folder after lesson `upto`: lessons 01..upto laid over each other."""
    merged: dict[str, Path] = {}
    for lesson in lessons:
        if lesson["id"] > upto:
            break
        merged.update(lesson_files(lesson))
    return merged


def verifier_files(lesson: dict) -> list[Path]:
    return sorted((KIT_ROOT / lesson["folder"] / "verifiers").glob("*.py"))


def _fresh(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)


def materialise(lessons: list[dict], lesson: dict, dest: Path, lab: Path | None = None) -> Path:
    """Fill `dest` (emptied first) with the lesson files and lay the lesson's verifiers over them."""
    if lab is not None:
        if not lab.is_dir():
            raise UsageError(f"--lab {lab}: not a folder")
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(lab, dest, ignore=COPY_IGNORE, symlinks=True)
    else:
        _fresh(dest)
        for rel, src in reference_files(lessons, lesson["id"]).items():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    for verifier in verifier_files(lesson):
        shutil.copy2(verifier, dest / verifier.name)
    return dest
