"""Read a learner's folder as it was at a commit, treating their git repository as data.

`grade --at REF` grades each lesson from the learner's own commit.  Running git *in* the learner's
repository is not safe for the grader: their `.git/config` (filters, fsmonitor, hooksPath, aliases),
`.gitattributes`, hooks, alternates, replace refs and `gitdir:` redirects are all code or pointers they
control, and the grader runs as root.  So only what names objects (HEAD, packed-refs, refs/, objects/) is
copied, without following links and with caps, into a private bare repository with a config of our own;
git runs only there, with no system/global config and an environment built from nothing; the tree is read
with `ls-tree` and the blobs with `cat-file --batch` (no archive, no checkout: those apply attributes and
filters), and every file is written by this module into a fresh folder.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from checks import boxfiles
from checks.intake import CAPS, Caps, IntakeRefused, take_in
from checks.workdir import UsageError
from shared.i18n import t

# A repository is bigger than the folder it holds: packs, every version of every file.
GIT_CAPS = Caps(file_bytes=32 << 20, total_bytes=256 << 20, files=50_000)
# What comes out is one learner folder: the same caps as taking in a plain folder.
EXPORT_CAPS = CAPS
GIT_SECONDS = 30
# Tags, branches, ids and rev suffixes (v1^, main~2, HEAD^{commit}); no spaces, colons or pathspecs.
REF_CHARS = re.compile(r"[A-Za-z0-9._/@{}^~-]+")
OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def export_commit(folder: Path, ref: str, dest: Path) -> Path:
    """Write `folder` as it was at `ref` into `dest` (emptied first); return the folder in `dest` that
    corresponds to `folder` (dest/<path of folder inside its repository>)."""
    if not ref or ref.startswith("-") or not REF_CHARS.fullmatch(ref):
        raise UsageError(t("--at {ref!r}: not a tag, branch or commit id", ref=ref))
    gitdir, prefix = _find_repository(Path(os.path.abspath(folder)))
    with tempfile.TemporaryDirectory(prefix="lab-gitread-") as private:
        copy, home = Path(private) / "repo.git", Path(private) / "home"
        home.mkdir(mode=0o700)
        _copy_repository(gitdir, copy)
        git = _Git(copy, home)
        commit = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        if commit.returncode != 0 or not OBJECT_ID.fullmatch(commit.stdout.decode().strip()):
            raise UsageError(_no_ref(git, folder, ref))
        entries = _listing(git, folder, ref, commit.stdout.decode().strip(), prefix)
        boxfiles.fresh_dir(dest)
        _write_blobs(git, entries, dest)
    return dest / prefix if prefix else dest


def _find_repository(folder: Path) -> tuple[Path, str]:
    """The `.git` directory of `folder` or its nearest ancestor, and folder's path inside that repository.
    Every level walked through must be a real directory, and `.git` itself too: a `.git` file
    (`gitdir: ../../other/.git`) or link would grade someone else's repository."""
    level, linked = folder, None
    while True:
        if linked is None and stat.S_ISLNK(_lstat(level, folder).st_mode):
            linked = level  # an error only if a repository is found above it (its .git is not "inside")
        dotgit = level / ".git"
        try:
            mode = os.lstat(dotgit).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None:
            if linked is not None:
                raise UsageError(t("{linked} is a symbolic link: --at reads only a repository inside the folder",
                                   linked=linked))
            if stat.S_ISDIR(mode):
                return dotgit, "" if level == folder else folder.relative_to(level).as_posix()
            link = stat.S_ISLNK(mode)
            pointer = f"-> {os.readlink(dotgit)}" if link else _peek(dotgit)
            raise UsageError(t("{dotgit} is a {link} pointing elsewhere ({pointer}): --at reads only a repository "
                               "inside the folder; hand in the repository with its .git directory (not a worktree or "
                               "submodule)", dotgit=dotgit, link=t('link') if link else t('file'), pointer=pointer))
        if level.parent == level:
            raise UsageError(t("{folder} is not a git repository: --at needs the learner's history", folder=folder))
        level = level.parent


def _copy_repository(gitdir: Path, copy: Path) -> None:
    """A bare repository of the learner's objects and refs, and nothing else of theirs."""
    copy.mkdir(mode=0o700)
    for name in ("objects", "refs"):  # take_in refuses links, fifos and devices anywhere below
        if not stat.S_ISDIR(_lstat(gitdir / name, gitdir).st_mode):
            raise UsageError(t("{gitdir} is not a directory", gitdir=gitdir / name))
        try:
            take_in(gitdir / name, copy / name, caps=GIT_CAPS, skip_dirs=frozenset())
        except IntakeRefused as exc:  # its message names the path inside objects/ or refs/: say which
            raise IntakeRefused(f"{gitdir / name}: {exc}") from None
    # Pointers to other people's objects, and objects standing in for others: never followed.
    for extra in ("objects/info/alternates", "objects/info/http-alternates", "refs/replace"):
        path = copy / extra
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (copy / "HEAD").write_bytes(_read_plain(gitdir / "HEAD", 4096))
    if os.path.lexists(gitdir / "packed-refs"):
        lines = _read_plain(gitdir / "packed-refs", GIT_CAPS.file_bytes).splitlines(keepends=True)
        kept, replaced = [], False
        for line in lines:  # drop refs/replace/* and the peeled `^id` line that follows one
            if not line.startswith(b"^"):
                replaced = line.split(b" ", 1)[-1].startswith(b"refs/replace/")
            if not replaced:
                kept.append(line)
        (copy / "packed-refs").write_bytes(b"".join(kept))
    (copy / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")


class _Git:
    """git against the private copy only: no config but ours, no hooks, no fsmonitor, no network."""

    def __init__(self, copy: Path, home: Path):
        self.argv = ["git", f"--git-dir={copy}", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                     "-c", "core.useReplaceRefs=false", "-c", "core.commitGraph=false", "-c", "protocol.allow=never"]
        # Built from nothing: no GIT_DIR, GIT_CONFIG_*, GIT_EXEC_PATH, XDG_CONFIG_HOME... of the grader's.
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_ATTR_NOSYSTEM": "1",
                    "GIT_TERMINAL_PROMPT": "0", "GIT_LITERAL_PATHSPECS": "1", "GIT_OPTIONAL_LOCKS": "0",
                    "LC_ALL": "C"}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*self.argv, *args], env=self.env, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=GIT_SECONDS)
        except subprocess.TimeoutExpired:
            raise UsageError(t("git {args} took over {git_seconds} s", args=args[0], git_seconds=GIT_SECONDS)) from None

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*self.argv, *args], env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)


def _no_ref(git: _Git, folder: Path, ref: str) -> str:
    kind = git.run("cat-file", "-t", "--end-of-options", ref)  # a ref that names something else?
    if kind.returncode == 0 and kind.stdout.strip() and kind.stdout.strip() != b"commit":
        found = kind.stdout.decode().strip()
        return t("{folder}: {ref} points at a {found}, not a commit", folder=folder, ref=ref, found=found)
    return t("{folder} has no {ref} (tag, branch or commit)", folder=folder, ref=ref)


def _listing(git: _Git, folder: Path, ref: str, commit: str, prefix: str) -> list[tuple[str, str, str, int]]:
    """(path, mode, id, size) of every file under `prefix` at `commit`, all checked before any is read."""
    listed = git.run("ls-tree", "-r", "-z", "-l", "--full-tree", commit, *(["--", prefix] if prefix else []))
    if listed.returncode != 0:  # e.g. a tree or blob that lives only behind alternates we did not copy
        why = listed.stderr.decode(errors="replace").strip()[-300:]
        raise UsageError(t("{folder}: {ref} has missing objects (objects/info/alternates is not followed): {why}",
                           folder=folder, ref=ref, why=why))
    entries, total, files, folders = [], 0, set(), set()
    for record in filter(None, listed.stdout.decode("utf-8", "surrogateescape").split("\0")):
        info, path = record.split("\t", 1)
        mode, _kind, oid, size = info.split()
        if prefix and path != prefix and not path.startswith(prefix + "/"):
            continue
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
            raise UsageError(t("{path!r}: unsafe path in commit {ref}", path=path, ref=ref))
        if mode == "120000":
            raise UsageError(t("{path} is a symbolic link in commit {ref}: the grader takes plain files only", ref=ref,
                               path=path))
        if mode == "160000":
            raise UsageError(t("{path} is a git submodule: its files are not in this repository", path=path))
        if mode not in ("100644", "100755") or path == prefix or not OBJECT_ID.fullmatch(oid):
            raise UsageError(t("{path}: not a plain file in commit {ref} (mode {mode})", path=path, ref=ref, mode=mode))
        if not size.isdigit():  # ls-tree -l prints BAD for a blob it cannot find
            raise UsageError(t("{path}: object {oid} is missing (objects/info/alternates is not followed)", path=path,
                               oid=oid))
        total += int(size)
        if int(size) > EXPORT_CAPS.file_bytes or total > EXPORT_CAPS.total_bytes or len(entries) >= EXPORT_CAPS.files:
            raise UsageError(t("{folder}: the files at {ref} are too big or too many (at {path})", folder=folder,
                               ref=ref, path=path))
        above = {"/".join(parts[:i]) for i in range(1, len(parts))}
        if path in files or path in folders or above & files:  # a crafted tree naming one path twice
            raise UsageError(t("{path!r}: appears twice in commit {ref}", path=path, ref=ref))
        files.add(path)
        folders |= above
        entries.append((path, mode, oid, int(size)))
    if not entries:
        raise UsageError(t("{folder} has no files at {ref}", folder=folder, ref=ref))
    return entries


def _write_blobs(git: _Git, entries: list[tuple[str, str, str, int]], dest: Path) -> None:
    """Each blob from `cat-file --batch` (header `<id> blob <size>`, then size bytes and LF) into a new file."""
    proc = git.popen("cat-file", "--batch")
    timer = threading.Timer(GIT_SECONDS, proc.kill)  # one deadline for the whole read
    timer.start()
    try:
        for path, mode, oid, size in entries:
            proc.stdin.write(oid.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline(200)
            if header.split() != [oid.encode(), b"blob", str(size).encode()]:
                got = header.decode(errors="replace").strip()
                raise UsageError(t("{path}: object {oid} missing or not as listed ({got})", path=path, oid=oid,
                                   got=got))
            data = proc.stdout.read(size + 1)
            if len(data) != size + 1:
                raise UsageError(t("{path}: reading the git object timed out or broke off", path=path))
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)  # dest is fresh and ours: no links in it
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data[:-1])
                os.fchmod(out.fileno(), 0o755 if mode == "100755" else 0o644)
    except (OSError, ValueError) as exc:  # git gone (killed at the deadline), a file we could not create
        raise UsageError(t("exporting to {dest} failed: {exc}", dest=dest, exc=exc)) from None
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _lstat(path: Path, about: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise UsageError(t("{about}: cannot read {path} ({strerror})", about=about, path=path,
                           strerror=exc.strerror)) from None


def _read_plain(path: Path, limit: int) -> bytes:
    """A regular file's bytes, never through a link nor blocking on a fifo (checks/boxfiles.read)."""
    try:
        data = boxfiles.read(path, limit + 1)
    except OSError as exc:
        raise UsageError(t("{path}: cannot be read as a plain file ({strerror})", path=path,
                           strerror=exc.strerror or exc)) from None
    if len(data) > limit:
        raise UsageError(t("{path}: too big", path=path))
    return data


def _peek(path: Path) -> str:
    try:
        return _read_plain(path, 4096).decode(errors="replace").strip()[:200]
    except UsageError:
        return "?"
