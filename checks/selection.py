"""What a command works on: the manifest, the lessons asked for, the learner's folder (given or remembered)
and the lesson that folder has reached."""

from __future__ import annotations

from pathlib import Path

from checks import boxfiles, progress
from checks.workdir import UsageError
from shared import manifest
from shared.i18n import t


def how_to_give_folder() -> str:
    """What to say when no folder of the learner's is known."""
    return t("no folder of yours is known yet. Give it once: make check LAB=~/shop-service/tasks_lab LESSON=01 "
             "(it is remembered; to see the reference work, use make lesson-01)")


def load() -> dict:
    """tasks.json, or a UsageError that says what is wrong with it."""
    try:
        return manifest.load()
    except manifest.ManifestError as exc:
        raise UsageError(t("malformed manifest: {exc}", exc=exc)) from None


def select(data: dict, ids: list[str], allow_planned: bool) -> list[dict]:
    """The lessons named by `ids` ("1", "01", or ["all"]); a planned one only when `allow_planned`."""
    lessons = data["lessons"]
    if ids == ["all"]:
        return lessons
    chosen = []
    for raw in ids:
        lesson_id = raw.zfill(2) if raw.isdigit() else raw
        lesson = manifest.lesson(lesson_id, data)
        if lesson is None:
            known = ", ".join(lesson["id"] for lesson in lessons)
            raise UsageError(t("no lesson {raw!r} (choose from {known}, or all)", raw=raw, known=known))
        if lesson["status"] != "ready" and not allow_planned:
            raise UsageError(t("lesson {lesson_id} is planned, not built yet", lesson_id=lesson_id))
        chosen.append(lesson)
    return chosen


def lab_path(raw: str | None) -> Path | None:
    """--lab DIR as an existing folder (resolved), or None when not given."""
    if raw is None:
        return None
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(t("--lab {raw}: no such folder", raw=raw))
    return path


def remembered_folder() -> Path:
    """The learner's folder remembered by an earlier `check --lab`, which must still exist."""
    lab = progress.learner_folder()
    if lab is None:
        raise UsageError(how_to_give_folder())
    if not lab.is_dir():
        raise UsageError(t("the remembered folder {lab} no longer exists: make check LAB=NEW_DIR, or make forget",
                           lab=lab))
    return lab


def new_files(lesson: dict, data: dict) -> list[str]:
    """The files lesson NN adds (not those it rewrites: an earlier lesson's folder has those too)."""
    earlier = {name for other in data["lessons"] if other["id"] < lesson["id"] for name in other.get("files", [])}
    return [name for name in lesson.get("files", []) if name not in earlier]


def reached_lesson(data: dict, folder: Path) -> str | None:
    """The highest lesson whose new files (those it adds, not those it rewrites: an earlier lesson's folder
    has those too) the folder already has."""
    reached, earlier = None, set()
    for lesson in data["lessons"]:
        new = [name for name in lesson.get("files", []) if name not in earlier]
        earlier.update(lesson.get("files", []))
        if lesson["status"] == "ready" and any(boxfiles.is_plain_file(folder / name) for name in new):
            reached = lesson["id"]
    return reached


def next_lesson(data: dict, folder: Path | None) -> tuple[str | None, str]:
    """The lesson a learner is on, and why: the highest lesson their folder's files reach — what the
    folder is, not which lesson some earlier run happened to check (a failed check of an earlier lesson
    never sends a learner back)."""
    if folder is None:
        return None, ""
    reached = reached_lesson(data, folder)
    if reached is None:
        return None, ""
    if progress.load(str(folder)).get(reached, {}).get("status") == "pass":
        return reached, t("you last passed lesson {reached}; your folder has no file of the next lesson yet",
                          reached=reached)
    return reached, t("your folder's files reach lesson {reached}", reached=reached)


def where_the_folder_is(lesson: dict, data: dict, reached: str | None) -> str:
    """Says how far the folder's files reach, and that lesson NN's new files are not among them."""
    new = ", ".join(new_files(lesson, data)[:4])
    at = t("your folder's files reach lesson {reached}", reached=reached) if reached else \
        t("your folder has no lesson's files yet")
    return t("{at}: the files lesson {id} adds ({new}) are not in it yet", at=at, id=lesson['id'], new=new)
