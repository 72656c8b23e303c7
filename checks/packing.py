"""A learner's folder and its results on their way to a grading machine and back: the folder packed as
tar.gz bytes (the same for the same content) and unpacked member by member, LessonResults as JSON."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from checks import intake
from checks.results import CheckResult, LessonResult
from shared.i18n import t

SIZE_LIMIT = 5 * 1024 * 1024              # packed bytes per folder; a course folder is a few hundred KB
RAW_FACTOR = 20                           # unpacked bytes per packed limit: zeros pack small but fill disks


class PackRefused(Exception):
    """This folder cannot be sent; the message says why (it becomes that student's error)."""


def _too_big(limit: int) -> PackRefused:
    mb = limit / 1024 / 1024
    return PackRefused(t("the folder packs to more than the {mb:g} MB limit and was not sent for grading: remove "
                         "large files (data, downloads, build output) and hand it in again", mb=mb))


def _caps(limit: int) -> intake.Caps:
    return dataclasses.replace(intake.CAPS, total_bytes=min(intake.CAPS.total_bytes, RAW_FACTOR * limit))


def pack_folder(folder: Path, limit: int = SIZE_LIMIT) -> bytes:
    """The folder as tar.gz bytes, the same for the same content (sorted, no owners or times): taken in as
    data first (checks/intake.py: no link followed, no special file read, what a local grade skips left
    out), so only plain files travel.  Refused past `limit` packed bytes or 20x that unpacked."""
    with tempfile.TemporaryDirectory(prefix="tasklab-pack-") as tmp:
        try:
            copy = intake.take_in(folder, Path(tmp) / "copy", _caps(limit))
        except intake.IntakeRefused as exc:
            raise PackRefused(str(exc)) from None
        try:
            return intake.pack(copy.path, limit)
        except intake.IntakeRefused:
            raise _too_big(limit) from None


def unpack(packed: bytes, dest: Path, limit: int = SIZE_LIMIT) -> None:
    """Into `dest` (made here), every member checked by the kit itself (checks/intake.py unpack: plain
    files and folders only, relative names, sizes counted as they are read) — never tarfile's extract."""
    try:
        intake.unpack(packed, dest, limit, _caps(limit))
    except intake.IntakeRefused as exc:
        raise PackRefused(str(exc)) from None


def results_to_wire(results: list, error: str | None, lab: str) -> dict:
    return {"lab": lab, "error": error, "lessons": [
        {"id": r.lesson["id"], "source": r.source, "seconds": r.seconds, "notices": r.notices,
         "problems": r.problems, "checks": [dataclasses.asdict(c) for c in r.checks]} for r in results]}


def _replace_path(value, old: str, new: str):
    """Paths of the worker's temporary copy become the learner's folder, as in a local grade."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_path(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_path(v, old, new) for k, v in value.items()}
    return value


def wire_to_results(wire: dict, data: dict, folder: str) -> tuple[list, str | None]:
    """Rebuild the LessonResults the worker had, so the report files come from the local code path."""
    if wire["lab"]:
        wire = _replace_path(wire, wire["lab"], folder)
    by_id = {lesson["id"]: lesson for lesson in data["lessons"]}
    results = [LessonResult(by_id[lesson["id"]], lesson["source"], [CheckResult(**c) for c in lesson["checks"]],
                            lesson["seconds"], notices=lesson["notices"], problems=lesson["problems"])
               for lesson in wire["lessons"]]
    return results, wire["error"]
