"""The host's side of the folders a box may write: made fresh, and read or written without following links.

A box writes into two folders of the host's disk: its scratch copy of the folder being checked and its
log folder.  Code in the box can leave anything there — a symlink named `box.log` pointing at a host
file, a FIFO named like a report, a folder swapped for a link — and the host (often root) must never
act through it.  So the host:

- makes each of those folders fresh before a box starts (whatever is at the path is removed, a link
  itself rather than what it points to), from a copy only the host can write (`stage`);
- reads what a box wrote with `read`, and appends its own lines with `append`: the folder is opened
  without following a link, the file by name beneath it with O_NOFOLLOW, only a regular file is used,
  and reads are capped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFile(OSError):
    """What a box left under a name the host reads is not a plain file (a link, a FIFO, a device)."""


def remove(path: Path) -> None:
    """Whatever is at `path`, gone: a link is unlinked (never followed), a folder removed with its
    contents (shutil.rmtree works by file descriptor and does not follow links inside)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, onerror=_gone_already)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _gone_already(function, path, exc_info) -> None:
    """rmtree's error handler: an entry another process removed meanwhile (two sweeps at once) is fine."""
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


def fresh_dir(path: Path) -> Path:
    """An empty folder at `path` made by the host now (its parents too)."""
    remove(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    return path


def private_dir(path: Path) -> Path:
    """A host folder (made if missing) that only its owner may enter: the parents of box folders."""
    path.mkdir(parents=True, exist_ok=True)
    if not path.is_symlink():
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
    return path


def stage(source: Path, workdir: Path) -> Path:
    """`workdir` made afresh as a copy of `source` (a folder only the host writes, holding only regular
    files and folders): each box starts from the host's copy, never from what an earlier box left."""
    remove(workdir)
    workdir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, workdir, symlinks=True)
    return workdir


def is_plain_file(path: Path) -> bool:
    """A regular file at `path` itself — a link is not followed to find one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _open_beneath(folder: Path, name: str, flags: int, mode: int = 0o644) -> int:
    dir_fd = os.open(folder, DIR_FLAGS)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def read(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the regular file `path` (its folder and the file itself not followed if
    links; a FIFO or device is never read).  Raises OSError (NotARegularFile included) when it cannot."""
    fd = _open_beneath(path.parent, path.name, os.O_RDONLY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(f"{path} is not a regular file")
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def append(path: Path, text: str) -> None:
    """Add the host's `text` to the log file `path` in a box's folder.  Anything there that is not a
    plain file (a link a box planted, a FIFO) is removed first, never written through."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = _open_beneath(path.parent, path.name, flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotARegularFile(path)
    except OSError:  # ELOOP (a link), ENXIO (a FIFO with no reader), a folder, not a regular file: replace it
        remove(path)
        fd = _open_beneath(path.parent, path.name, flags | os.O_EXCL)
    with os.fdopen(fd, "a", encoding="utf-8") as stream:
        stream.write(text)
