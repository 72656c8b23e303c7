"""Take a learner's folder in: read it once, as data, into a host-owned copy.

Instructors grade strangers' folders, often as root, and ordinary file APIs follow symbolic links: a
`notes.py -> /proc/kmsg` hangs the grader, a link to /root/secret gets read, a 1 GiB sparse file
becomes 1 GB of real disk.  So this is the one place a learner's folder is read.  It walks by file
descriptor (never by path, so nothing a link points to is ever opened), takes plain files and folders
only, never opens a FIFO or a device, and caps size, count, depth and time.  Everything after it
touches only the copy.  `pack`/`unpack` carry a copy to a remote worker, checking every member again.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from checks.boxfiles import DIR_FLAGS
from checks.workdir import UsageError, disk_full
from shared.i18n import t


class IntakeRefused(UsageError):
    """The folder cannot be taken in; str(exc) names the path, why, and what to do."""


@dataclass(frozen=True)
class Caps:
    file_bytes: int = 16 * 1024**2     # apparent size (st_size), per file
    total_bytes: int = 64 * 1024**2    # apparent sizes, whole folder
    files: int = 5000                  # regular files + directories
    depth: int = 24                    # directory nesting
    seconds: float = 30.0              # wall clock for the whole walk


CAPS = Caps()


@dataclass
class Intake:
    path: Path      # the copy
    files: int      # regular files in it (folders are not counted here, though Caps.files counts them)
    bytes: int      # their total size


# Never descended, never counted.  Matched by name whatever the entry is (a submodule's `.git` is a file).
SKIP_DIRS = {".venv", "venv", "__pycache__", ".git", ".state", ".lab", ".pytest_cache", "node_modules", ".mypy_cache",
             ".ruff_cache"}

CHUNK = 1 << 20
_DIR = DIR_FLAGS
# O_NONBLOCK: should the entry be swapped for a FIFO between stat and open, the open cannot hang.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _plain() -> str:
    return t("the grader reads a folder as plain files only")


def _shown(rel: str) -> str:
    """A name as a terminal can show it: non-UTF-8 bytes as \\xff, a newline or other control as in repr."""
    text = os.fsencode(rel).decode("utf-8", "backslashreplace")
    return text if text.isprintable() else repr(text)


def _size(n: int) -> str:
    if n < 1 << 20:
        return t("{n} bytes", n=n)
    mb = n / (1 << 20)
    return f"{mb:.0f} MB" if mb == int(mb) else f"{mb:.1f} MB"


def _mode(st_mode: int) -> int:
    # No setuid/setgid/sticky, no group or world write: executable or not is all that survives.
    return 0o755 if st_mode & 0o111 else 0o644


class _Budget:
    """Running counts against the caps, for take_in and unpack alike; refuses the moment one is passed."""

    def __init__(self, caps: Caps):
        self.caps = caps
        self.deadline = time.monotonic() + caps.seconds
        self.entries = self.files = self.bytes = 0

    def tick(self, rel: str) -> None:
        if time.monotonic() >= self.deadline:
            raise IntakeRefused(t("reading the folder took over {seconds:g} s (stopped at {shown}): move large or "
                                  "generated files out of the folder", seconds=self.caps.seconds, shown=_shown(rel)))

    def too_many(self, rel: str) -> IntakeRefused:
        return IntakeRefused(t("more than {files} files and folders (stopped at {shown}): move generated files out "
                               "of the folder", files=self.caps.files, shown=_shown(rel)))

    def entry(self, rel: str, is_dir: bool) -> None:
        self.entries += 1
        if self.entries > self.caps.files:
            raise self.too_many(rel)
        if is_dir and rel.count("/") + 1 > self.caps.depth:
            raise IntakeRefused(t("{shown} is nested deeper than {depth} folders: flatten the folder",
                                  shown=_shown(rel), depth=self.caps.depth))

    def file(self, rel: str, size: int) -> None:
        """A regular file of `size` bytes (its apparent size), counted before a byte of it is read."""
        if size > self.caps.file_bytes:
            raise IntakeRefused(t("{shown} is {size} (apparent size), over the {size2} per-file limit: move it out "
                                  "of the folder", shown=_shown(rel), size=_size(size),
                                  size2=_size(self.caps.file_bytes)))
        if self.bytes + size > self.caps.total_bytes:
            raise IntakeRefused(t("with {shown} the folder is over the {size} limit for the whole folder: move large "
                                  "files out of the folder", shown=_shown(rel), size=_size(self.caps.total_bytes)))
        self.files += 1
        self.bytes += size


def _unreadable(shown, exc: OSError) -> IntakeRefused:
    return IntakeRefused(t("{shown} cannot be read: {strerror}", shown=shown, strerror=exc.strerror))


def _changed(rel: str) -> IntakeRefused:
    return IntakeRefused(t("{shown} changed while it was being read: try again when nothing writes to the folder",
                           shown=_shown(rel)))


def _copy(read, out, rel: str, size: int, budget: _Budget) -> None:
    """Copy from read(n) to the file `out`, in chunks; a source with more than `size` bytes is refused."""
    left = size + 1     # reading one byte past `size` is how a file that grew shows itself
    while True:
        budget.tick(rel)
        chunk = read(min(CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)
        if left <= 0:
            raise _changed(rel)
        out.write(chunk)


def take_in(folder: Path, dest: Path, caps: Caps = CAPS, skip_dirs=SKIP_DIRS) -> Intake:
    """Copy the learner's `folder` into `dest` (which must not exist): plain files and folders only."""
    folder, dest = Path(folder), Path(dest)
    if os.path.lexists(dest):
        raise ValueError(f"take_in: {dest} already exists")
    try:
        st = os.lstat(folder)
    except OSError as exc:
        raise _unreadable(folder, exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise IntakeRefused(t("{folder} is a symbolic link: give the folder itself", folder=folder))
    if not stat.S_ISDIR(st.st_mode):
        raise IntakeRefused(t("{folder} is not a folder", folder=folder))
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(dest, 0o700)
    budget = _Budget(caps)
    try:
        try:
            src = os.open(folder, _DIR)   # O_NOFOLLOW: swapped for a link since the lstat -> refused
        except OSError as exc:
            raise _unreadable(folder, exc) from None
        try:
            out = os.open(dest, _DIR)
            try:
                if (os.fstat(src).st_dev, os.fstat(src).st_ino) != (st.st_dev, st.st_ino):
                    raise _changed(".")
                _walk(src, out, "", budget, frozenset(skip_dirs))
            finally:
                os.close(out)
        finally:
            os.close(src)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)    # rmtree works by file descriptor: safe on anything
        raise
    return Intake(dest, budget.files, budget.bytes)


def _walk(src: int, out: int, top: str, budget: _Budget, skip: frozenset) -> None:
    """Copy the folder open as `src` into the folder open as `out`; `top` is its path in the folder."""
    names = []
    with os.scandir(src) as entries:
        for entry in entries:
            budget.tick(top or ".")
            names.append(entry.name)
            if len(names) > budget.caps.files:     # do not even list an endless folder
                raise budget.too_many(f"{top}/{entry.name}" if top else entry.name)
    for name in sorted(names):      # sorted: the same folder is refused for the same path every time
        rel = f"{top}/{name}" if top else name
        budget.tick(rel)
        if name in ("", ".", "..") or "/" in name:
            raise IntakeRefused(t("{shown} is not a usable file name", shown=_shown(rel)))
        if name in skip or name.endswith(".pyc"):
            continue
        try:
            _take(src, out, name, rel, budget, skip)
        except OSError as exc:
            if disk_full(exc):
                raise   # the copy could not be written: this machine's disk is full, the learner's file is fine
            raise _unreadable(_shown(rel), exc) from None


def _take(src: int, out: int, name: str, rel: str, budget: _Budget, skip: frozenset) -> None:
    st = os.stat(name, dir_fd=src, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, _DIR, dir_fd=src)
        try:
            if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) != (st.st_dev, st.st_ino):
                raise _changed(rel)
            try:
                os.stat("pyvenv.cfg", dir_fd=sub, follow_symlinks=False)
                return      # a virtual environment under another name: skipped like .venv
            except FileNotFoundError:
                pass
            budget.entry(rel, True)
            os.mkdir(name, 0o755, dir_fd=out)
            sub_out = os.open(name, _DIR, dir_fd=out)
            try:
                os.fchmod(sub_out, 0o755)   # as files get theirs: the same copy whatever the grader's umask
                _walk(sub, sub_out, rel, budget, skip)
            finally:
                os.close(sub_out)
        finally:
            os.close(sub)
    elif stat.S_ISREG(st.st_mode):
        budget.entry(rel, False)
        budget.file(rel, st.st_size)
        fd = os.open(name, _READ, dir_fd=src)
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise _changed(rel)
            with open(os.open(name, _WRITE, 0o600, dir_fd=out), "wb") as copy:
                os.fchmod(copy.fileno(), _mode(st.st_mode))
                _copy(lambda n: os.read(fd, n), copy, rel, st.st_size, budget)
        finally:
            os.close(fd)
    elif stat.S_ISLNK(st.st_mode):
        target = _shown(os.readlink(name, dir_fd=src))     # read as text for the message, never followed
        raise IntakeRefused(t("{shown} is a symbolic link (to {target}): {plain}; replace the link with the file "
                              "itself", shown=_shown(rel), target=target, plain=_plain()))
    else:
        what = (t("a named pipe (FIFO)") if stat.S_ISFIFO(st.st_mode) else
                t("a socket") if stat.S_ISSOCK(st.st_mode) else
                t("a device file") if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                t("a special file"))
        raise IntakeRefused(t("{shown} is {what}: {plain}; move it out of the folder", shown=_shown(rel), what=what,
                              plain=_plain()))


class _Full(Exception):
    pass


class _Sink:
    """Where pack's gzip output goes: _Full as soon as it passes the limit (and on every write after)."""

    def __init__(self, limit: int):
        self.data, self.limit = bytearray(), limit

    def write(self, b) -> int:
        self.data += b
        if len(self.data) > self.limit:
            raise _Full
        return len(b)

    def flush(self) -> None:
        pass


def _tree(top: Path, rel: str = ""):
    """(relative name, lstat) of everything under `top`, sorted, each folder before what it holds."""
    for name in sorted(os.listdir(top / rel if rel else top)):
        sub = f"{rel}/{name}" if rel else name
        st = os.lstat(top / sub)
        yield sub, st
        if stat.S_ISDIR(st.st_mode):
            yield from _tree(top, sub)


def pack(copy: Path, limit: int) -> bytes:
    """A tar.gz of an intake copy: the same bytes for the same content (sorted, no times, no owners)."""
    copy, sink, at = Path(copy), _Sink(limit), "."
    try:
        with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for at, st in _tree(copy):
                info = tarfile.TarInfo(at)      # uid/gid 0, no user or group names, mtime 0
                if stat.S_ISDIR(st.st_mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    info.mode, info.size = _mode(st.st_mode), st.st_size
                    with open(copy / at, "rb") as data:
                        tar.addfile(info, data)
                else:
                    raise IntakeRefused(t("{shown} is not a plain file or folder: {plain}", shown=_shown(at),
                                          plain=_plain()))
    except _Full:
        raise IntakeRefused(t("packing passed the {size} limit at {shown}: move large files out of the folder",
                              size=_size(limit), shown=_shown(at))) from None
    return bytes(sink.data)


class _Bounded:
    """The unzipped tar stream, refused once longer than the caps could need.  Member data is counted
    again as it is written; this bounds what tarfile reads by itself (headers, data it skips)."""

    def __init__(self, raw, caps: Caps):
        self.raw, self.at = raw, "."
        self.left = caps.total_bytes + (caps.files + 1) * 8192   # the data, and room for headers and padding

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(self.left + 1 if n < 0 else min(n, self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise IntakeRefused(t("the packed folder unpacks to too much data (stopped at {shown})",
                                  shown=_shown(self.at)))
        return data


def _kind(member: tarfile.TarInfo) -> str:
    return (t("a symbolic link") if member.issym() else
            t("a hard link") if member.islnk() else
            t("a device file") if member.ischr() or member.isblk() else
            t("a named pipe (FIFO)") if member.isfifo() else
            t("an entry of type {type!r}", type=member.type))


def unpack(packed: bytes, dest: Path, limit: int, caps: Caps = CAPS) -> Intake:
    """Unpack what `pack` made into `dest` (which must not exist), checking every member ourselves."""
    dest = Path(dest)
    if len(packed) > limit:
        raise IntakeRefused(t("the packed folder is {size}, over the {size2} limit", size=_size(len(packed)),
                              size2=_size(limit)))
    if os.path.lexists(dest):
        raise ValueError(f"unpack: {dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(dest, 0o700)
    budget, seen, folders = _Budget(caps), set(), set()
    stream = _Bounded(gzip.GzipFile(fileobj=io.BytesIO(packed)), caps)
    try:
        # "r|": read front to back, never seeking; nothing here calls extract() or extractall().
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                stream.at = name = member.name
                budget.tick(name)
                here = t("{shown} in the packed folder", shown=_shown(name))
                parts = name.split("/")     # an absolute name starts with an empty part
                if "\0" in name or any(part in ("", ".", "..") for part in parts):
                    raise IntakeRefused(t("{here} is not a plain relative path", here=here))
                if not (member.isdir() or member.type in (tarfile.REGTYPE, tarfile.AREGTYPE)):
                    raise IntakeRefused(t("{here} is {kind}: only plain files and folders are accepted", here=here,
                                          kind=_kind(member)))
                if name in seen:
                    raise IntakeRefused(t("{here} appears twice", here=here))
                seen.add(name)
                if len(parts) > 1 and "/".join(parts[:-1]) not in folders:
                    raise IntakeRefused(t("{here} comes before its folder", here=here))
                budget.entry(name, member.isdir())
                # A path inside our fresh dest, where only we have created anything: no link on the way.
                target = dest / name
                if member.isdir():
                    os.mkdir(target, 0o755)
                    os.chmod(target, 0o755)     # whatever the umask, as take_in
                    folders.add(name)
                    continue
                budget.file(name, member.size)
                with open(os.open(target, _WRITE, 0o600), "wb") as copy:
                    os.fchmod(copy.fileno(), _mode(member.mode))
                    _copy(tar.extractfile(member).read, copy, name, member.size, budget)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise IntakeRefused(t("the packed folder cannot be read (stopped at {shown}): {exc}", shown=_shown(stream.at),
                              exc=exc)) from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return Intake(dest, budget.files, budget.bytes)
