"""The judge: the process that decides a lesson's checks, out of learner code's reach.

inbox.py makes itself non-dumpable before any learner code exists, then has the judge of each verifier
forked — no exec, so the judge is non-dumpable from its first instruction.  It is forked from the box's
fork server (shared/forkserver.py: started before any learner process, non-dumpable too, holding no key),
so it starts with the packages the lesson uses already imported, and its own fork server is a copy of that
one; where there is none (TASKLAB_FORKSERVER=0, not in a box) inbox.py forks it itself.  A learner process in the
box (same uid) therefore cannot ptrace it, read its memory or open its file descriptors through
/proc: the verdict key and channel stay the judge's.  The judge never imports a learner module: its
path holds the kit and its lesson's verifiers folder (read-only), never the work folder.  Learner code
runs in probes (shared/probe.py), in the learner's own scripts and servers, all separate processes
that report observations; the judge decides.  A fork the judge itself makes (multiprocessing) loses
the channel at once.  If learner code kills or stops the judge, the runner sees no result: ERROR or
TIMEOUT, never a pass.

Every lesson of the kit is judged this way (tasks.json "judge": "separate").  A lesson without it — only
the runner's own tests make such lessons now — runs its verifier through checks/launch.py, the older and
weaker line where learner modules could be imported into the verifier.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys
from pathlib import Path

PR_SET_DUMPABLE = 4


def make_undumpable() -> None:
    """No ptrace, no /proc/PID/mem, fd or environ for processes of the same uid without CAP_SYS_PTRACE.
    Inherited by fork, reset by exec: so a judge is forked, never exec'd."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def separate(lesson: dict) -> bool:
    """tasks.json says so per lesson ("judge": "separate") while lessons move over one by one."""
    return lesson.get("judge") == "separate"


def start(verifier: str, verifiers: Path, signer, env: dict, workdir: Path) -> tuple[int, int]:
    """Fork the judge for `verifier` (in the kit's read-only `verifiers` folder): (pid, fd of its output).
    Called by inbox.py only."""
    read_end, write_end = os.pipe()
    pid = _start_warm(verifier, verifiers, signer, env, workdir, write_end)
    if pid is None:
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            _end_with(lambda: _judge(verifier, verifiers, signer, env, workdir))
    os.close(write_end)
    return pid, read_end


def _start_warm(verifier: str, verifiers: Path, signer, env: dict, workdir: Path, output: int) -> int | None:
    """The judge forked from the box's fork server (None: there is none).  Its key and run id reach it
    through a pipe only it reads, never through the server's memory."""
    from checks.verdicts import key_pipe
    from shared import warm
    channel, key, run = signer.handoff()
    secret = key_pipe(key + run.encode())
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        judge = {"verifier": verifier, "verifiers": str(verifiers), "channel": channel, "secret": secret}
        return warm.start_entry("checks.judge", "run_forked", judge,
                                [sys.executable, "-I", str(Path(__file__).resolve()), verifier], workdir, env,
                                null, output, (channel, secret))
    finally:
        os.close(null)
        os.close(secret)


def run_forked(judge: dict, server_sock) -> None:
    """The judge, in a process forked from the box's fork server (shared/forkserver.py _entry): its output
    on fds 1 and 2, the channel and the pipe with its key at the numbers `judge` names.  Never returns."""
    from checks.verdicts import KEY_BYTES, Signer
    from shared import warm
    warm.use_server(server_sock)

    def judged() -> int:
        secret = b""
        while chunk := os.read(judge["secret"], 4096):
            secret += chunk
        os.close(judge["secret"])
        if len(secret) <= KEY_BYTES:
            raise SystemExit("verdict key missing")
        signer = Signer(judge["channel"], secret[:KEY_BYTES], secret[KEY_BYTES:].decode())
        return _judge(judge["verifier"], Path(judge["verifiers"]), signer, dict(os.environ), Path.cwd())
    _end_with(judged)


def _end_with(judged) -> None:
    """Run the judge; end the process with its exit status, whatever happens."""
    code = 70
    try:
        code = judged()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - said on the output; the missing results are the runner's ERROR
        import traceback
        traceback.print_exc()
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _judge(verifier: str, verifiers: Path, signer, env: dict, workdir: Path) -> int:
    import atexit
    import signal
    from shared import proc, tap
    # What the judge inherits from inbox.py is inbox's: its exit handlers and the processes it started
    # are not the judge's to stop.  The judge's own are run at its end (start() ends with os._exit).
    atexit._clear()
    proc.disown_started()
    atexit.register(proc.stop_leftovers)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(env)
    os.environ["TASKLAB_JUDGE_VERIFIERS"] = str(verifiers)
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.stdout
    # A child forked from here (multiprocessing) runs whatever it is given: it never holds the channel.
    os.register_at_fork(after_in_child=signer.close)
    signer.send({"type": "launch", "verifier": verifier})
    # A result is believed only while no module from the folder is loaded here (tap._intact).
    tap.install_channel(signer, learner_folder=workdir)
    # The kit and this lesson's verifiers, read-only; never the work folder.
    work = str(workdir)
    sys.path[:] = [p for p in sys.path if p not in ("", ".", work)]
    sys.path.insert(0, str(verifiers))
    sys.argv = [str(verifiers / verifier)]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        atexit._run_exitfuncs()
    return 0
