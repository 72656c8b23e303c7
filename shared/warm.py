"""Start the learner's Python processes warm: forked from shared/forkserver.py instead of each a cold start.

WarmPopen is subprocess.Popen whose child, when it can be, is forked from this process's fork server (one
per process, started at its first warm command) and handed to this process as its own child; otherwise
(off, another program, options the server does not take) it is exec'd as ever.  Either way the caller
waits for, signals and reaps it as any child: nothing is taken on the server's word (forkserver.py says
why, and what starts cold).
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading

from shared import forkserver

PR_SET_CHILD_SUBREAPER = 36


class _Server:
    """The fork server of this process (started at its first warm command, or by prepare(); one per pid,
    never inherited).  A judge forked from the box's server is given one ready-made (use_server)."""

    def __init__(self, ready: socket.socket | None = None):
        self.lock = threading.Lock()
        self.owner = os.getpid()
        self.libc = ctypes.CDLL(None, use_errno=True)
        if ready is not None:
            self.sock = ready
            return
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The blank argument is room: each child writes its own command line over this one's (ps, /proc).
        argv = [sys.executable, forkserver.__file__, str(theirs.fileno()), " " * forkserver.CMDLINE_ROOM]
        # Never stopped here: it ends with the asker (PR_SET_PDEATHSIG) or with its box.
        self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs.close()

    def ask(self, request: dict, fds: list[int]) -> dict:
        with self.lock:
            # A subreaper only while the program is handed over: an orphan of any other moment (a killed
            # worker's pool child) still goes to the box's init, which reaps it, as it always did.
            self._subreaper(1)
            try:
                data = json.dumps(request).encode()
                socket.send_fds(self.sock, [forkserver.HEADER.pack(len(data)) + data], fds)
                return json.loads(forkserver.read_message(self.sock))
            finally:
                self._subreaper(0)

    def _subreaper(self, on: int) -> None:
        if self.libc.prctl(PR_SET_CHILD_SUBREAPER, on, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


_server: _Server | None = None
_broken = False


def enabled() -> bool:
    """In a box (thrown away whole, fork server and all, when its lesson ends), unless TASKLAB_FORKSERVER
    says otherwise: on the host a fork server would outlive the command that started it."""
    default = "1" if os.environ.get("TASKLAB_BOXED") == "1" else "0"
    return os.environ.get("TASKLAB_FORKSERVER", default) == "1" and sys.platform == "linux"


def prepare() -> None:
    """Start this process's fork server now, before any learner process exists (the box's inbox does, as
    judges are forked from it: start_entry)."""
    global _server, _broken
    if _broken or not enabled() or (_server is not None and _server.owner == os.getpid()):
        return
    try:
        _server = _Server()
    except OSError:
        _broken = True


def use_server(sock: socket.socket) -> None:
    """In a judge forked from the box's server: its own server (on `sock`), a fork of that one made before the
    judge held anything (shared/forkserver.py _entry)."""
    global _server
    _server = _Server(sock)


def start_entry(module: str, call: str, args: dict, argv: list[str], cwd, env: dict, stdin: int, output: int,
                pass_fds: tuple) -> int | None:
    """Fork a process that calls `module.call(args, server_socket)` (a judge: checks/judge.py
    run_forked) from the server prepare() started: its pid, a child of this process -- or None (no such
    server: the caller starts it its own way)."""
    if _server is None or _server.owner != os.getpid():
        return None
    entry = {"kit": os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module": module, "call": call,
             "args": args}
    return warm_start(argv, cwd, env, stdin, output, output, False, pass_fds, entry=entry)


def warm_start(argv: list[str], cwd, env: dict | None, stdin: int, stdout: int, stderr: int,
               new_session: bool, pass_fds: tuple = (), entry: dict | None = None) -> int | None:
    """Start `argv` (this interpreter's `python …`) forked from the warm server: its pid, a child of this
    process — or None when it must start cold (the caller then starts it as before)."""
    global _server, _broken
    if _broken or not enabled() or not argv or argv[0] != sys.executable:
        return None
    try:
        if _server is None or _server.owner != os.getpid():
            _server = _Server()
        request = {"argv": [str(a) for a in argv], "cwd": os.fspath(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env), "session": new_session,
                   "pass": list(pass_fds)}
        if entry is not None:
            request["entry"] = entry
        answer = _server.ask(request, [stdin, stdout, stderr, *pass_fds])
    except (OSError, EOFError, ValueError):
        _broken = True  # the server is gone (or was ended): everything from here on starts cold
        return None
    pid = answer.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:  # ours to wait for, or refused: a pid the server names must be this process's own child
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        raise OSError(f"the fork server named pid {pid}, which is not this process's child") from None
    return pid


class WarmPopen(subprocess.Popen):
    """subprocess.Popen, with the child forked from the warm server when it can be (else exec'd as ever)."""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       restore_signals, gid, gids, uid, umask, start_new_session, process_group):
        plain = (executable is None and not shell and preexec_fn is None and close_fds
                 and len(pass_fds) <= forkserver.MAX_FDS - 3
                 and gid is None and not gids and uid is None and umask < 0 and process_group in (None, -1)
                 and isinstance(args, (list, tuple)))
        pid = None
        if plain:
            pid = warm_start(list(args), cwd, env, p2cread if p2cread != -1 else 0,
                             c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2,
                             start_new_session, tuple(pass_fds))
        if pid is None:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                                          startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                                          c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                                          start_new_session, process_group)
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        return None
