"""checks/intake.py: a learner's folder is read once, as plain data, into a host-owned copy.

A folder-shape fuzz for take_in (every link, FIFO, socket, device and cap refused, naming the path;
skipped folders and odd names handled), then pack/unpack with hand-built hostile archives.  Fast: no
servers, no boxes; anything that could hang runs in a thread with a timeout.
"""

import gzip
import io
import os
import socket
import stat
import tarfile
import threading

import pytest

from checks import intake
from checks.intake import Caps, Intake, IntakeRefused, pack, take_in, unpack
from checks.workdir import UsageError

MB = 1 << 20


@pytest.fixture(autouse=True)
def _english(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")


def write(path, data=b"", mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def tree(root):
    """bytes relative path -> ("dir", mode) or ("file", mode, content), for everything under root."""
    root = os.fsencode(root)
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                assert stat.S_ISREG(st.st_mode), rel
                with open(path, "rb") as f:
                    found[rel] = ("file", stat.S_IMODE(st.st_mode), f.read())
    return found


def within(seconds, fn, *args, **kwargs):
    """fn(*args) in a daemon thread: its result or exception, or a test failure if it blocks."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:    # handed back to the test
            box["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def opened(monkeypatch):
    """Every name os.open was given during the test."""
    names = []
    real = os.open

    def spy(path, *args, **kwargs):
        names.append(os.fsdecode(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", spy)
    return names


def refused(folder, dest, caps=intake.CAPS):
    with pytest.raises(IntakeRefused) as info:
        take_in(folder, dest, caps)
    assert not os.path.lexists(dest), "a refused intake left its partial copy"
    return str(info.value)


# --- take_in: what is copied ---------------------------------------------------------------------


def test_plain_folder_copied_exactly(tmp_path):
    src = tmp_path / "learner"
    write(src / "app.py", b"print('hi')\n")
    write(src / "run.sh", b"#!/bin/sh\necho\n", 0o700)
    write(src / "empty.txt")
    write(src / "pkg" / "deep" / "er" / "mod.py", b"x = 1\n", 0o664)
    (src / "pkg" / "empty_dir").mkdir()
    got = take_in(src, tmp_path / "out" / "copy")
    assert got == Intake(tmp_path / "out" / "copy", 4, 12 + 15 + 0 + 6)
    assert stat.S_IMODE(os.stat(got.path).st_mode) == 0o700
    assert tree(got.path) == {
        b"app.py": ("file", 0o644, b"print('hi')\n"),
        b"run.sh": ("file", 0o755, b"#!/bin/sh\necho\n"),
        b"empty.txt": ("file", 0o644, b""),
        b"pkg": ("dir", 0o755), b"pkg/deep": ("dir", 0o755), b"pkg/deep/er": ("dir", 0o755),
        b"pkg/deep/er/mod.py": ("file", 0o644, b"x = 1\n"),
        b"pkg/empty_dir": ("dir", 0o755),
    }


def test_the_copy_is_the_same_whatever_the_graders_umask(tmp_path):
    """An instructor's hardened umask (077) changes nothing: folders are 0755 in the copy and after
    unpacking, as files keep only their executable bit."""
    write(tmp_path / "learner" / "pkg" / "deep" / "mod.py", b"x = 1\n")
    hardened = os.umask(0o077)
    try:
        copy = take_in(tmp_path / "learner", tmp_path / "copy").path
        back = unpack(pack(copy, 10 * MB), tmp_path / "back", 10 * MB).path
    finally:
        os.umask(hardened)
    for folder in (copy, back):
        assert tree(folder) == {b"pkg": ("dir", 0o755), b"pkg/deep": ("dir", 0o755),
                                b"pkg/deep/mod.py": ("file", 0o644, b"x = 1\n")}


def test_a_full_disk_is_not_blamed_on_the_learners_file(tmp_path, monkeypatch):
    """The copy could not be written: the learner's notes.py is fine ("notes.py cannot be read" was wrong)."""
    import errno
    write(tmp_path / "learner" / "notes.py", b"x = 1\n")

    def full(read, out, rel, size, budget):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(intake, "_copy", full)
    with pytest.raises(OSError) as raised:
        take_in(tmp_path / "learner", tmp_path / "copy")
    assert raised.type is OSError and raised.value.errno == errno.ENOSPC    # not an IntakeRefused naming the file
    assert not (tmp_path / "copy").exists()


def test_environments_caches_and_vcs_are_skipped_links_and_all(tmp_path):
    src = tmp_path / "learner"
    write(src / "app.py", b"ok")
    write(src / ".venv" / "pyvenv.cfg", b"home = /usr/bin")
    (src / ".venv" / "bin").mkdir()
    os.symlink("/usr/bin/python3", src / ".venv" / "bin" / "python")
    write(src / "env" / "pyvenv.cfg", b"home = /usr/bin")       # a venv under another name
    os.symlink("lib", src / "env" / "lib64")
    os.mkfifo(src / "env" / "fifo")
    write(src / "pkg" / "__pycache__" / "m.cpython-311.pyc", b"\0")
    os.symlink("/etc/shadow", src / "pkg" / "__pycache__" / "stale")
    write(src / "pkg" / "m.py", b"m")
    write(src / "pkg" / "old.pyc", b"\0")
    write(src / ".git" / "HEAD", b"ref: refs/heads/main")
    os.symlink("/nowhere", src / ".git" / "dangling")
    write(src / "sub" / ".git", b"gitdir: ../.git/modules/sub")   # a submodule's .git is a file
    got = take_in(src, tmp_path / "copy")
    assert sorted(tree(got.path)) == [b"app.py", b"pkg", b"pkg/m.py", b"sub"]
    assert got.files == 2


def test_skip_dirs_can_be_given(tmp_path):
    write(tmp_path / "f" / "build" / "huge.bin", b"x" * 100)
    write(tmp_path / "f" / "a.py", b"a")
    got = take_in(tmp_path / "f", tmp_path / "copy", skip_dirs={"build"})
    assert sorted(tree(got.path)) == [b"a.py"]


def test_odd_names_are_copied_exactly(tmp_path):
    src = tmp_path / "learner"
    names = [b"-rf", b"=cmd()", b"a b", b"new\nline.py", b"\xff.py", b"--", b"\xe4\xb8\xad.py"]
    os.mkdir(src)
    for i, name in enumerate(names):
        with open(os.path.join(os.fsencode(src), name), "wb") as f:
            f.write(b"%d" % i)
    os.mkdir(os.path.join(os.fsencode(src), b"dir \xfe"))
    with open(os.path.join(os.fsencode(src), b"dir \xfe", b"-x"), "wb") as f:
        f.write(b"inner")
    got = take_in(src, tmp_path / "copy")
    expected = {name: ("file", 0o644, b"%d" % i) for i, name in enumerate(names)}
    expected[b"dir \xfe"] = ("dir", 0o755)
    expected[b"dir \xfe/-x"] = ("file", 0o644, b"inner")
    assert tree(got.path) == expected


def test_setuid_setgid_and_sticky_are_dropped(tmp_path):
    write(tmp_path / "f" / "suid", b"x", 0o4755)
    write(tmp_path / "f" / "sgid", b"x", 0o2640)
    write(tmp_path / "f" / "odd", b"x", 0o1777)
    got = take_in(tmp_path / "f", tmp_path / "copy")
    assert {k: v[1] for k, v in tree(got.path).items()} == {b"suid": 0o755, b"sgid": 0o644, b"odd": 0o755}


def test_dest_that_exists_is_a_caller_bug(tmp_path):
    write(tmp_path / "f" / "a.py", b"a")
    write(tmp_path / "copy" / "keep", b"mine")
    with pytest.raises(ValueError):
        take_in(tmp_path / "f", tmp_path / "copy")
    assert (tmp_path / "copy" / "keep").read_bytes() == b"mine"


# --- take_in: what is refused ---------------------------------------------------------------------


def test_refusal_is_a_usage_error():
    assert issubclass(IntakeRefused, UsageError)


@pytest.mark.parametrize("link, target, named", [
    ("notes.py", "/etc/hostname", "notes.py is a symbolic link (to /etc/hostname)"),
    ("notes.py", "app.py", "notes.py is a symbolic link (to app.py)"),                # inside -> inside
    ("notes.py", "missing.py", "notes.py is a symbolic link (to missing.py)"),        # dangling
    ("data", "/etc", "data is a symbolic link (to /etc)"),                            # to a folder
    ("pkg/kmsg.py", "/proc/kmsg", "pkg/kmsg.py is a symbolic link (to /proc/kmsg)"),  # deeper down
    ("pkg/up", "..", "pkg/up is a symbolic link (to ..)"),
])
def test_any_symlink_refuses_the_folder(tmp_path, link, target, named):
    src = tmp_path / "learner"
    write(src / "app.py", b"a")
    (src / "pkg").mkdir()
    os.symlink(target, src / link)
    message = refused(src, tmp_path / "copy")
    assert named in message and "replace the link with the file itself" in message


def test_fifo_is_refused_promptly_and_never_opened(tmp_path, opened):
    src = tmp_path / "learner"
    write(src / "app.py", b"a")
    os.mkfifo(src / "pipe.py")
    message = within(5, refused, src, tmp_path / "copy")
    assert message.startswith("pipe.py is a named pipe (FIFO)")
    assert "pipe.py" not in opened


def test_socket_is_refused(tmp_path):
    src = tmp_path / "f"
    src.mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        message = within(5, refused, src, tmp_path / "copy")
    assert message.startswith("sock is a socket")


@pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a device needs root")
def test_char_device_is_refused_and_never_opened(tmp_path, opened):
    src = tmp_path / "f"
    (src / "sub").mkdir(parents=True)
    try:
        os.mknod(src / "sub" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("no CAP_MKNOD here")
    message = within(5, refused, src, tmp_path / "copy")
    assert message.startswith("sub/null is a device file")
    assert "null" not in opened


def test_sparse_gigabyte_is_refused_by_apparent_size(tmp_path):
    src = tmp_path / "f"
    src.mkdir()
    with open(src / "data.bin", "wb") as f:
        f.truncate(1 << 30)
    message = within(5, refused, src, tmp_path / "copy")
    assert message == ("data.bin is 1024 MB (apparent size), over the 16 MB per-file limit: "
                       "move it out of the folder")


def test_per_file_cap(tmp_path):
    write(tmp_path / "f" / "ok.bin", b"x" * 100)
    assert take_in(tmp_path / "f", tmp_path / "c1", Caps(file_bytes=100)).bytes == 100
    write(tmp_path / "f" / "big.bin", b"x" * 101)
    assert refused(tmp_path / "f", tmp_path / "c2", Caps(file_bytes=100)).startswith(
        "big.bin is 101 bytes (apparent size), over the 100 bytes per-file limit")


def test_total_cap(tmp_path):
    for name in "abc":
        write(tmp_path / "f" / f"{name}.bin", b"x" * 100)
    assert "with c.bin the folder is over the 250 bytes limit for the whole folder" in refused(
        tmp_path / "f", tmp_path / "copy", Caps(total_bytes=250))


def test_count_cap_counts_files_and_folders(tmp_path):
    for i in range(9):
        write(tmp_path / "f" / f"{i}.txt")
    (tmp_path / "f" / "sub").mkdir()
    assert take_in(tmp_path / "f", tmp_path / "c1", Caps(files=10)).files == 9
    write(tmp_path / "f" / "sub" / "one-more.txt")
    assert "more than 10 files and folders (stopped at sub/one-more.txt)" in refused(
        tmp_path / "f", tmp_path / "c2", Caps(files=10))


def test_one_huge_folder_is_not_even_listed_whole(tmp_path):
    for i in range(30):
        write(tmp_path / "f" / "many" / f"{i:02}")
    assert "more than 20 files and folders" in refused(tmp_path / "f", tmp_path / "copy", Caps(files=20))


def test_depth_cap(tmp_path):
    write(tmp_path / "f" / "a" / "b" / "c" / "ok.py")
    assert take_in(tmp_path / "f", tmp_path / "c1", Caps(depth=3)).files == 1
    (tmp_path / "f" / "a" / "b" / "c" / "d").mkdir()
    assert refused(tmp_path / "f", tmp_path / "c2", Caps(depth=3)) == (
        "a/b/c/d is nested deeper than 3 folders: flatten the folder")


def test_time_cap(tmp_path):
    for name in ("a.py", "b.py", "c.py"):
        write(tmp_path / "f" / name, b"x")
    assert refused(tmp_path / "f", tmp_path / "copy", Caps(seconds=0)).startswith(
        "reading the folder took over 0 s (stopped at ")


def test_a_file_longer_than_its_size_is_never_read_unbounded():
    source = io.BytesIO(b"x" * 1000)
    with pytest.raises(IntakeRefused, match="grew.py changed while it was being read"):
        intake._copy(source.read, io.BytesIO(), "grew.py", 10, intake._Budget(Caps()))
    assert source.tell() == 11


def test_folder_itself_must_be_a_real_folder(tmp_path):
    write(tmp_path / "real" / "a.py", b"a")
    os.symlink(tmp_path / "real", tmp_path / "link")
    message = refused(tmp_path / "link", tmp_path / "copy")
    assert message == f"{tmp_path / 'link'} is a symbolic link: give the folder itself"
    assert "is not a folder" in refused(tmp_path / "real" / "a.py", tmp_path / "copy")
    assert "cannot be read" in refused(tmp_path / "missing", tmp_path / "copy")


def test_odd_names_are_shown_readably_in_refusals(tmp_path):
    src = tmp_path / "f"
    src.mkdir()
    os.symlink(b"/etc/\xff", os.path.join(os.fsencode(src), b"x\ny\xff"))
    assert refused(src, tmp_path / "copy").startswith("'x\\ny\\\\xff' is a symbolic link (to /etc/\\xff)")


def test_messages_in_chinese(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "zh")
    write(tmp_path / "f" / "a.py", b"a")
    os.symlink("/etc/hostname", tmp_path / "f" / "notes.py")
    assert refused(tmp_path / "f", tmp_path / "copy") == (
        "notes.py 是符号链接（指向 /etc/hostname）：评分程序只把文件夹当作普通文件来读，请用文件本身替换这个链接")


# --- pack / unpack ---------------------------------------------------------------------------------


def learner(root, stamp):
    write(root / "app.py", b"print('hi')\n")
    write(root / "run.sh", b"#!/bin/sh\n", 0o755)
    write(root / "pkg" / "deep" / "m.py", b"m = 1\n")
    (root / "pkg" / "empty").mkdir()
    with open(os.path.join(os.fsencode(root), b"\xff -rf"), "wb") as f:
        f.write(b"odd")
    for path in [root, *root.rglob("*")]:
        os.utime(path, (stamp, stamp))
    return root


def test_pack_unpack_round_trip(tmp_path):
    copy = take_in(learner(tmp_path / "f", 1e9), tmp_path / "copy")
    packed = pack(copy.path, 10 * MB)
    back = unpack(packed, tmp_path / "back", 10 * MB)
    assert tree(back.path) == tree(copy.path)
    assert (back.files, back.bytes) == (copy.files, copy.bytes)
    assert stat.S_IMODE(os.stat(back.path).st_mode) == 0o700


def test_pack_is_deterministic(tmp_path):
    one = take_in(learner(tmp_path / "f1", 1e9), tmp_path / "c1")
    two = take_in(learner(tmp_path / "f2", 2e9), tmp_path / "c2")
    packed = pack(one.path, MB)
    assert packed == pack(two.path, MB) == pack(one.path, MB)
    assert packed[4:8] == b"\0\0\0\0"     # gzip mtime
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}


def test_pack_refuses_over_its_limit_while_packing(tmp_path):
    write(tmp_path / "f" / "noise.bin", os.urandom(200_000))
    copy = take_in(tmp_path / "f", tmp_path / "copy")
    with pytest.raises(IntakeRefused, match="packing passed the 100000 bytes limit at noise.bin"):
        pack(copy.path, 100_000)


class Zeros:
    def __init__(self, n):
        self.left = n

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def packed_of(*members):
    """A tar.gz of (name, type, data-or-size) members, built by hand; extra TarInfo fields by keyword."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, *extra in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            for key, value in (extra[0] if extra else {}).items():
                setattr(info, key, value)
            if isinstance(data, int):
                info.size = data
                tar.addfile(info, Zeros(data))
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


REG, DIR = tarfile.REGTYPE, tarfile.DIRTYPE


def header_bomb(kind):
    """A tar whose first header is a PAX header or GNU long name of 100 MB of zeros: tarfile itself reads
    all of such a header into memory, before any member is seen."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = kind, 100 * MB
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(header.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
        for _ in range(100):
            gz.write(bytes(MB))
    return out.getvalue()


@pytest.mark.parametrize("members, caps, named", [
    ([("/etc/passwd", REG, b"x")], Caps(), "/etc/passwd in the packed folder is not a plain relative path"),
    ([("../x", REG, b"x")], Caps(), "../x in the packed folder is not a plain relative path"),
    ([("a", DIR, None), ("a/../../x", REG, b"x")], Caps(), "a/../../x in the packed folder is not a plain"),
    ([("./x", REG, b"x")], Caps(), "./x in the packed folder is not a plain relative path"),
    ([("a//x", REG, b"x")], Caps(), "a//x in the packed folder is not a plain relative path"),
    ([("link", tarfile.SYMTYPE, None, {"linkname": "/etc/passwd"})], Caps(),
     "link in the packed folder is a symbolic link"),
    ([("a.py", REG, b"x"), ("hard", tarfile.LNKTYPE, None, {"linkname": "a.py"})], Caps(),
     "hard in the packed folder is a hard link"),
    ([("null", tarfile.CHRTYPE, None, {"devmajor": 1, "devminor": 3})], Caps(),
     "null in the packed folder is a device file"),
    ([("disk", tarfile.BLKTYPE, None, {"devmajor": 8, "devminor": 0})], Caps(),
     "disk in the packed folder is a device file"),
    ([("pipe", tarfile.FIFOTYPE, None)], Caps(), "pipe in the packed folder is a named pipe (FIFO)"),
    ([("a.py", REG, b"x"), ("a.py", REG, b"y")], Caps(), "a.py in the packed folder appears twice"),
    ([("a", DIR, None), ("a", DIR, None)], Caps(), "a in the packed folder appears twice"),
    ([("a/b.py", REG, b"x")], Caps(), "a/b.py in the packed folder comes before its folder"),
    ([("a.py", REG, b"x"), ("a.py/b.py", REG, b"x")], Caps(), "a.py/b.py in the packed folder comes before"),
    ([("big.bin", REG, 2 * MB)], Caps(file_bytes=MB), "big.bin is 2 MB (apparent size), over the 1 MB"),
    ([("bomb.bin", REG, 100 * MB)], Caps(file_bytes=MB), "bomb.bin is 100 MB (apparent size)"),
    ([("a", REG, 600), ("b", REG, 600)], Caps(total_bytes=1000), "with b the folder is over the 1000 bytes"),
    ([(f"{i}", REG, b"") for i in range(4)], Caps(files=3), "more than 3 files and folders (stopped at 3)"),
    ([("a", DIR, None), ("a/b", DIR, None)], Caps(depth=1), "a/b is nested deeper than 1 folders"),
    ([("a", REG, b"x")], Caps(seconds=0), "reading the folder took over 0 s (stopped at a)"),
], ids=lambda v: v[0][0] if isinstance(v, list) and isinstance(v[0], tuple) else None)
def test_unpack_refuses(tmp_path, members, caps, named):
    packed = packed_of(*members)
    with pytest.raises(IntakeRefused) as info:
        unpack(packed, tmp_path / "dest", len(packed), caps)
    assert named in str(info.value)
    assert not os.path.lexists(tmp_path / "dest")


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME])
def test_unpack_refuses_a_bomb_in_a_header_by_counting(tmp_path, kind):
    packed = header_bomb(kind)
    with pytest.raises(IntakeRefused, match="the packed folder unpacks to too much data"):
        within(5, unpack, packed, tmp_path / "dest", MB, Caps(total_bytes=MB, files=10))
    assert not os.path.lexists(tmp_path / "dest")


def test_unpack_refuses_over_its_limit_before_reading(tmp_path):
    packed = packed_of(("a.py", REG, os.urandom(1000)))
    with pytest.raises(IntakeRefused, match=f"the packed folder is {len(packed)} bytes, over the 100 bytes limit"):
        unpack(packed, tmp_path / "dest", 100)
    assert not os.path.lexists(tmp_path / "dest")


# Named ids and a fixed gzip time: parallel test workers must collect the same ids (a byte id with the
# gzip header's timestamp differed between workers once a second boundary fell between their collections).
@pytest.mark.parametrize("packed", [b"", b"not a tarball", gzip.compress(b"not a tar either" * 100, mtime=0)],
                         ids=["empty", "text", "gzip-not-tar"])
def test_unpack_refuses_what_is_not_a_packed_folder(tmp_path, packed):
    with pytest.raises(IntakeRefused, match="the packed folder cannot be read"):
        unpack(packed, tmp_path / "dest", MB)
    assert not os.path.lexists(tmp_path / "dest")


def test_unpack_refuses_a_half_written_folder_and_removes_it(tmp_path):
    good = packed_of(("a", DIR, None), ("a/b.py", REG, b"x" * 5000), ("c.py", REG, b"y"))
    with pytest.raises(IntakeRefused):
        unpack(good[: len(good) // 2], tmp_path / "dest", MB)
    assert not os.path.lexists(tmp_path / "dest")


def test_unpack_dest_that_exists_is_a_caller_bug(tmp_path):
    (tmp_path / "dest").mkdir()
    with pytest.raises(ValueError):
        unpack(packed_of(("a", REG, b"x")), tmp_path / "dest", MB)
