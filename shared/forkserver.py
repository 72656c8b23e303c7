"""A warm interpreter that the learner's Python processes are forked from, instead of each starting cold.

A Celery worker, beat, a publisher or uvicorn spends 0.3–0.6 CPU-seconds importing celery, kombu,
fastapi… before it does anything, and a lesson starts twenty or thirty of them.  The box's inbox starts
this server before any learner process exists: it imports those packages once, as its programs need them,
and forks a child per command.  Judges are forked from it too (it is non-dumpable, and holds no key:
checks/judge.py), each with a fork of it as its own server -- so no box imports Celery twice.
The child becomes the program a cold `python ARGV` would have run — same argv, cwd, environment, sys.path,
standard streams and exit status — so the lesson sees the same process it always did.

Nothing about the verdict is taken on the fork server's word.  It forks twice and lets the middle process
end, so the program is handed to the nearest "child subreaper" above it: the process that asked, which
marked itself one for that moment.  That process then waits for, signals and reaps the program as its own
child (a pid that is not its child is refused, and a command the server cannot run warm is run cold).

What the server imports for a program it reads from the program's text and its arguments, and from the
modules they import from the program's own folders — as text, never run.  What cannot be carried over
runs cold, never warm: interpreter options other than -I -E -s -B -u -P, an environment differing from
the server's in a PYTHON*/locale variable or in one the warm packages read on import, a module in the
program's folders (its sys.path, the folder it runs in, a folder it is given) that would shadow a warm
package (a learner's `celery.py`), a script that is not a readable file (the cold interpreter says why).
It works in boxes only (TASKLAB_FORKSERVER=0 turns it off there, =1 on anywhere).  shared/warm.py is the
asking side.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import io
import json
import os
import signal
import socket
import struct
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
FLAGS = frozenset("IEsBuP")
LOCALE = ("LANG", "LANGUAGE", "TMPDIR", "TMP", "TEMP", "HOME", "PYTHONUSERBASE")
HEADER = struct.Struct("!I")
CMDLINE_ROOM = 2048
MAX_FDS = 16  # stdin, stdout, stderr and what pass_fds names


# ---------------------------------------------------------------------------------------------- the wire

def read_message(sock, fds: list | None = None) -> bytes:
    """One message: its length (HEADER), then its bytes; descriptors sent with it are added to `fds`."""
    head = b""
    if fds is not None:
        head, got, _, _ = socket.recv_fds(sock, HEADER.size, MAX_FDS)
        fds.extend(got)
    head += _exactly(sock, HEADER.size - len(head))
    return _exactly(sock, HEADER.unpack(head)[0])


def _exactly(sock, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise EOFError("the fork server's channel closed")
        data += part
    return data


# ---------------------------------------------------------------------------------------------- the server

class _Cold(Exception):
    """This command must start cold; the reason is for whoever reads the server's code, not shown."""


class _Warm:
    """What this server has imported for its children: {top-level name: file} of each module a file on a
    program's sys.path could shadow, and the environment variables read while importing."""

    def __init__(self):
        self.groups: set[str] = set()
        self.shadowable: dict[str, str] = {}
        self.read: set[str] = set()

    def need(self, groups: set[str]) -> None:
        """Import the groups not imported yet, noting each environment variable read meanwhile."""
        groups = groups - self.groups
        if not groups:
            return
        self.groups |= groups
        read, before = self.read, set(sys.modules)

        class Noting(os._Environ):
            def __getitem__(self, key):
                read.add(key)
                return super().__getitem__(key)

            def __contains__(self, key):
                read.add(key)
                return super().__contains__(key)

        real = os.environ
        os.environ = Noting(real._data, real.encodekey, real.decodekey, real.encodevalue,  # noqa: B003 - a
                            real.decodevalue)  # view of the same variables, only noting which are read
        try:
            import importlib
            for group in sorted(groups):
                for name in _STATE["scan"].GROUPS[group]:
                    try:
                        importlib.import_module(name)
                    except Exception:  # noqa: BLE001 - not installed (or broken): it just starts cold
                        pass
        finally:
            os.environ = real  # noqa: B003
        self.note_loaded(before)
        # What was imported lives as long as any child: kept out of every collection, so a child's
        # collections and its exit do not touch (and copy) the pages it shares with this server -- 0.2 s
        # of CPU per exit otherwise.
        gc.freeze()

    def note_loaded(self, before: set[str]) -> None:
        """Each module loaded since `before` that a file on a program's path could shadow."""
        for name in {n.split(".")[0] for n in set(sys.modules) - before}:
            origin = getattr(getattr(sys.modules.get(name), "__spec__", None), "origin", None)
            if origin and os.path.isabs(origin):  # built-in and frozen modules are found before any path
                self.shadowable[name] = origin


def _plan(request: dict, base_path: list[str]) -> dict:
    """What the child does: {kind: module|code|script, target, argv, path, unbuffered, no_bytecode,
    ignore_env}."""
    argv, env, cwd = request["argv"], request["env"], request["cwd"]
    flags, i = set(), 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-"):
        letters = argv[i][1:]
        if not letters or not set(letters) <= FLAGS:
            raise _Cold(f"option {argv[i]}")
        flags |= set(letters)
        i += 1
    if i >= len(argv) or argv[i] == "-":
        raise _Cold("no program")
    if "I" in flags:
        flags |= {"E", "s", "P"}
    ignore_env = "E" in flags
    if argv[i] in ("-m", "-c"):
        if i + 1 >= len(argv):
            raise _Cold("no argument")
        kind, target, rest = ("module" if argv[i] == "-m" else "code"), argv[i + 1], argv[i + 2:]
        first = cwd if kind == "module" else ""
        child_argv = [argv[i], *rest]
    else:
        kind, target, rest = "script", argv[i], argv[i + 1:]
        script = os.path.join(cwd, target)
        if not os.path.isfile(script) or not os.access(script, os.R_OK):
            raise _Cold("script")
        first = os.path.dirname(os.path.realpath(script))
        child_argv = [target, *rest]
    path = [] if "P" in flags else [first]
    if not ignore_env and env.get("PYTHONPATH"):
        path += [os.path.join(cwd, entry) if entry else cwd for entry in env["PYTHONPATH"].split(os.pathsep)]
    import site
    user_site = site.getusersitepackages() if "s" not in flags and "PYTHONNOUSERSITE" not in env else None
    if "s" in flags and site.ENABLE_USER_SITE and site.USER_SITE in base_path:
        raise _Cold("user site")
    path += base_path
    if user_site and os.path.isdir(user_site) and user_site not in path:
        raise _Cold("user site")
    return {"kind": kind, "target": target, "argv": child_argv, "path": path, "ignore_env": ignore_env,
            "unbuffered": "u" in flags or (not ignore_env and bool(env.get("PYTHONUNBUFFERED"))),
            "no_bytecode": "B" in flags or (not ignore_env and bool(env.get("PYTHONDONTWRITEBYTECODE")))}


def _entry_plan(request: dict, base_path: list[str]) -> dict:
    """A function of the kit's (a judge: checks/judge.py), forked like a program, then called by _entry()."""
    entry = request["entry"]
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("kit", "module", "call")):
        raise _Cold("entry request")
    return {"kind": "entry", "entry": entry, "argv": request["argv"][1:], "path": list(base_path),
            "unbuffered": True, "no_bytecode": True}


def _entry(plan: dict):
    """In a process forked to call a function of the kit's (a judge).  Its own fork server is forked
    first, from this process as it stands -- warm, holding no secret and none of the kit's modules -- then
    the function runs, and ends the process.  Returns only in that server: None when the caller is gone,
    else the plan of a program it forked."""
    mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    caller = os.getpid()
    if os.fork() == 0:
        mine.close()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != caller:  # already gone
            os._exit(0)
        # None of the caller's descriptors (a judge's output, channel and key): only this server's socket.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _close_all_but({its.fileno()}, its.fileno() + 2)
        _set_cmdline([sys.executable, os.path.abspath(__file__), "(a judge's)"])
        return _loop(its)
    its.close()
    entry = plan["entry"]
    sys.path[:] = [entry["kit"], *_STATE["base_path"]]
    import importlib
    getattr(importlib.import_module(entry["module"]), entry["call"])(entry["args"], mine)
    os._exit(70)  # the function ends the process itself


def _check(plan: dict, request: dict, start_env: dict, warm: _Warm) -> None:
    """Cold unless the warm imports are what this program's own start would have made: its environment
    agrees with the server's wherever an import (or the interpreter's start) reads it, and each warm
    module is the one its own sys.path finds first (a learner's `celery.py` in front of it starts cold)."""
    env = request["env"]
    for key in set(env) | set(start_env):
        sensitive = key.startswith(("PYTHON", "LC_")) or key in LOCALE or key in warm.read
        ignored = plan["ignore_env"] and key.startswith("PYTHON")
        if sensitive and not ignored and env.get(key) != start_env.get(key) and key not in (
                "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"):  # these three: applied per child
            raise _Cold(f"environment {key}")
    from importlib.machinery import PathFinder
    cwd = request["cwd"]
    # Its own folders (warm_imports.folders) count as on its path even when the interpreter does not put
    # them there: the kit's probe server (-I) adds them itself, after the standard library.
    entries = _STATE["scan"].folders(plan, cwd)
    entries += [entry if os.path.isabs(entry) else os.path.join(cwd, entry) for entry in plan["path"]]
    for name, origin in warm.shadowable.items():
        try:
            spec = PathFinder.find_spec(name, entries)
        except (ImportError, ValueError, OSError):
            raise _Cold(f"{name} unresolvable") from None
        if spec is None or spec.origin != origin:
            raise _Cold(f"{name} shadowed")


_STATE: dict = {}  # the server's own: its start environment, base path, what it imported and read


def _serve(fd: int):
    """Answer requests until the asker goes; return (in a forked child only) the plan the child runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Judges are forked from here (checks/judge.py), so no process of the box's uid may trace this one or
    # read its memory: set before it forks anything (its asker starts it before any learner process).
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    import warm_imports  # beside this file, which is sys.path[0] until the next line but two
    start_env = dict(os.environ)
    pythonpath = start_env["PYTHONPATH"].split(os.pathsep) if start_env.get("PYTHONPATH") else []
    base_path = sys.path[1 + len(pythonpath):]  # after this file's folder and PYTHONPATH: stdlib, site-packages
    sys.path[:] = base_path  # the warm packages come from there only
    warm = _Warm()
    # What this server loaded for itself (json, socket…) counts too, but for its own two modules.
    warm.note_loaded(before={"__main__", "warm_imports"})
    _STATE.update(start_env=start_env, base_path=base_path, warm=warm, scanned={}, scan=warm_imports)
    return _loop(socket.socket(fileno=fd))


def _loop(sock):
    """Serve one asker on `sock` until it goes: the box's inbox, or (in a copy of this server) a judge."""
    start_env, base_path, warm, scanned = (_STATE[k] for k in ("start_env", "base_path", "warm", "scanned"))
    while True:
        fds: list[int] = []
        try:
            request = json.loads(read_message(sock, fds))
        except (EOFError, OSError, ValueError):
            return None
        try:
            passed = request.get("pass", [])
            if len(fds) != 3 + len(passed) or not all(isinstance(fd, int) and fd > 2 for fd in passed):
                raise _Cold("descriptors")
            if request.get("entry") is not None:
                plan = _entry_plan(request, base_path)
            else:
                plan = _plan(request, base_path)
                warm.need(_STATE["scan"].groups_for(plan, request["cwd"], scanned))
                _check(plan, request, start_env, warm)
        except _Cold:
            _answer(sock, {"cold": True})
            _close(fds)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:  # the middle process: fork the program, say its pid, end (the asker adopts it)
            os.close(read_end)
            program = os.fork()
            if program == 0:
                os.close(write_end)
                sock.close()
                _become(request, plan, fds)
                return plan
            os.write(write_end, str(program).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as stream:
            said = stream.read()
        os.waitpid(middle, 0)  # once it has ended, the program is the asker's child
        _close(fds)
        _answer(sock, {"pid": int(said)} if said.isdigit() else {"cold": True})


def _answer(sock, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(HEADER.pack(len(data)) + data)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _close_all_but(keep: set[int], top: int) -> None:
    """Close every descriptor from 3 up (at least to `top`) but those in `keep`."""
    last = 3
    for fd in sorted(keep - {0, 1, 2}):
        os.closerange(last, fd)
        last = fd + 1
    os.closerange(last, max(os.sysconf("SC_OPEN_MAX"), top))


def _become(request: dict, plan: dict, fds: list[int]) -> None:
    """In the forked child: the process a cold `python ARGV` would be, up to running its program."""
    if request["session"]:
        os.setsid()
    # stdin, stdout, stderr, then each pass_fds descriptor at its own number (as Popen's pass_fds): moved
    # above every number involved first, so that no dup2 overwrites one still to be placed.
    targets = [0, 1, 2, *request.get("pass", [])]
    floor = max(targets + fds) + 1
    for target, fd in zip(targets, [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in fds], strict=True):
        os.dup2(fd, target)
    _close_all_but(set(targets), floor + len(fds) + 1)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile
    tempfile.tempdir = None  # worked out again from this environment, when first needed
    # What multiprocessing noted on import belongs to the process it starts in: the folder (its children
    # find a relative __main__ there) and a secret of its own.
    multiprocessing_process = sys.modules.get("multiprocessing.process")
    if multiprocessing_process is not None:
        multiprocessing_process.ORIGINAL_DIR = os.path.abspath(os.getcwd())
        multiprocessing_process.current_process().authkey = os.urandom(32)
    sys.modules.pop("warm_imports", None)  # the server's own, not on the program's path
    sys.path[:] = plan["path"]
    sys.argv[:] = plan["argv"]
    sys.orig_argv[:] = request["argv"]
    _set_cmdline(request["argv"])
    sys.dont_write_bytecode = plan["no_bytecode"]
    import importlib
    importlib.invalidate_caches()
    _fresh_stdio(plan["unbuffered"])
    if plan["kind"] != "entry":  # a program is as a cold start leaves it; a judge stays out of reach
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def _set_cmdline(argv: list[str]) -> None:
    """Write this child's own argv over the server's in memory, where ps and /proc/PID/cmdline read it
    (the server's last argument is blank room for this); too long for the room, it is cut."""
    try:
        with open("/proc/self/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of stat(5)
    except (OSError, IndexError, ValueError):
        return
    data = b"\0".join(os.fsencode(arg) for arg in argv)[:end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def _fresh_stdio(unbuffered: bool) -> None:
    """sys.stdin/out/err on fds 0-2, buffered as a cold start would buffer them there."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        tty = raw.isatty()
        if fd == 0:
            buffer = io.BufferedReader(raw)
        elif unbuffered:
            buffer = raw
        else:
            buffer = io.BufferedWriter(raw)
        stream = io.TextIOWrapper(buffer, encoding=old.encoding, errors=old.errors, newline="\n",
                                  line_buffering=not unbuffered and fd != 0 and (tty or fd == 2),
                                  write_through=unbuffered and fd != 0)
        stream.mode = "r" if fd == 0 else "w"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run(plan: dict) -> None:
    """Run the program as `python -m / -c / SCRIPT` would, in a fresh __main__.  What it raises goes up to
    the interpreter unchanged, which reports and exits as a cold one does (tracebacks start at the program)."""
    import builtins
    import types
    from importlib.machinery import BuiltinImporter, SourceFileLoader
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    main.__annotations__ = {}
    if plan["kind"] == "script":
        # Since 3.9 a script's __file__ (and the name in its tracebacks) is its absolute path.
        plan["target"] = main.__file__ = os.path.abspath(plan["target"])
        main.__cached__ = None
        main.__loader__ = SourceFileLoader("__main__", main.__file__)
    elif plan["kind"] == "code":
        main.__loader__ = BuiltinImporter
    sys.modules["__main__"] = main
    here = os.path.abspath(__file__)

    def hook(kind, value, tb):
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
            tb = tb.tb_next
        if isinstance(value, BaseException):
            value = value.with_traceback(tb)  # what is printed is the exception's own traceback
        sys.__excepthook__(kind, value, tb)
    sys.excepthook = hook
    if plan["kind"] == "module":
        import runpy
        runpy._run_module_as_main(plan["target"])  # what `python -m` itself calls
    elif plan["kind"] == "code":
        exec(compile(plan["target"], "<string>", "exec", dont_inherit=True), main.__dict__)
    else:
        with io.open_code(plan["target"]) as stream:
            source = stream.read()
        exec(compile(source, plan["target"], "exec", dont_inherit=True), main.__dict__)


if __name__ == "__main__":
    _plan_to_run = _serve(int(sys.argv[1]))
    while _plan_to_run is not None and _plan_to_run["kind"] == "entry":
        _plan_to_run = _entry(_plan_to_run)
    if _plan_to_run is None:
        sys.exit(0)
    del _plan_to_run["path"]
    _run(_plan_to_run)
