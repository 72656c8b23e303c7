"""What runs inside a box: the lesson's servers, its processes, then its verifiers, one after another.

    python -I checks/inbox.py SPEC.json     (cwd: the work dir; started by checks/sandbox.py)

Judging is not done here: every verdict goes, signed, straight from the verifier to the runner outside
(checks/verdicts.py), which also keeps each check's time limit and stops the box.  This program only sets
the stage, and reports on the same channel what stopped it from doing so.
"""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(KIT))

from checks import judge  # noqa: E402
from checks.verdicts import Signer, key_pipe, read_key  # noqa: E402
from shared import warm  # noqa: E402

LIMITS = {  # set before any learner code runs; a process may lower its limits, never raise them
    resource.RLIMIT_NOFILE: 4096,
    resource.RLIMIT_FSIZE: 256 * 1024 * 1024,  # one file; the runner bounds the total written
    resource.RLIMIT_CPU: 900,                  # CPU seconds per process; the wall clock bounds it first
    resource.RLIMIT_CORE: 0,
}


def set_limits(nproc: int | None) -> None:
    limits = dict(LIMITS)
    if nproc:  # no cgroup (not root): processes of this user, counted machine-wide by the kernel
        limits[resource.RLIMIT_NPROC] = nproc
        limits[resource.RLIMIT_AS] = 4 * 1024 ** 3  # and no memory cgroup: address space per process
    for which, value in limits.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def main() -> int:
    # Before the key is read and before any learner process exists: no process of the box's uid may
    # read this one's memory or descriptors, nor those of the judges forked from it (checks/judge.py).
    judge.make_undumpable()
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    key = read_key(int(os.environ.pop("TASKLAB_VERDICT_KEY_FD")))
    channel = int(os.environ.pop("TASKLAB_VERDICT_FD"))
    run = os.environ.pop("TASKLAB_VERDICT_RUN")
    signer = Signer(channel, key, run)
    signer.send({"type": "inbox"})  # before any verifier exists: the runner learns which process is this one
    set_limits(spec.get("nproc"))
    # The box's fork server, now: judges are forked from it, so it must exist before any learner process.
    warm.prepare()

    from checks.servers import SchemaError, prepare_services, start_processes, stop_processes
    from shared.proc import WaitTimeout

    lesson, workdir, log_dir = spec["lesson"], Path.cwd(), Path(spec["log_dir"])
    env = dict(os.environ, **spec["env"])
    try:
        for notice in prepare_services(lesson, workdir, schema_upto=spec["schema_upto"]):
            signer.send({"type": "notice", "message": notice})
    except SchemaError as exc:  # the folder's own schema: every check of this run is an error, said once
        signer.send({"type": "problem", "kind": "schema", "message": str(exc)})
        return 0
    if spec.get("script"):  # a kit script (the soak, a benchmark): its exit status is the box's
        feeder = None
        if spec.get("monitor"):  # numbers for `make monitor`, written where the host can read them
            with open(log_dir / "monitor-feed.log", "ab") as log:
                feeder = subprocess.Popen([sys.executable, "-m", "checks.monitor", "feed", "--out",
                                           str(log_dir / "monitor.json"), "--env-file",
                                           str(workdir / ".env.tasks")], cwd=KIT, env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            return subprocess.run([sys.executable, *spec["script"]], cwd=workdir, env=env).returncode
        finally:
            if feeder is not None:
                feeder.terminate()
                feeder.wait()
    try:
        procs = start_processes(lesson, workdir, log_dir, env)
    except (AssertionError, WaitTimeout) as exc:
        signer.send({"type": "problem", "kind": "process", "message": f"background process not ready: {exc}"})
        return 0
    try:
        for verifier in spec["verifiers"]:
            if judge.separate(lesson):
                with open(log_dir / f"{Path(verifier).stem}.log", "ab") as log:
                    pid, output = judge.start(verifier, Path(spec["verifiers_dir"]), signer, env, workdir)
                    with os.fdopen(output, "rb") as stream:
                        _copy_out(stream, log)
                    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                signer.send({"type": "exit", "verifier": verifier, "code": code})
                continue
            with open(log_dir / f"{Path(verifier).stem}.log", "ab") as log:
                fd = key_pipe(key)
                proc_env = dict(env, TASKLAB_VERDICT_KEY_FD=str(fd), TASKLAB_VERDICT_FD=str(channel),
                                TASKLAB_VERDICT_RUN=run)
                # Output to the box's own stdout (read and capped by the runner) and to the verifier's log.
                proc = subprocess.Popen([sys.executable, "-I", str(KIT / "checks" / "launch.py"), verifier],
                                        cwd=workdir, env=proc_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, pass_fds=(fd, channel))
                os.close(fd)
                _copy_out(proc.stdout, log)
                code = proc.wait()
            signer.send({"type": "exit", "verifier": verifier, "code": code})
    finally:
        # Every verdict is in.  In a box nothing outlives it (its servers are its own, thrown away with it):
        # the lesson's processes are killed at once, not given a warm shutdown (a Celery worker's takes ~1 s).
        # Bare, on the kit's shared servers, a worker still gives back what it holds before it goes.
        stop_processes(procs, grace=0 if os.environ.get("TASKLAB_BOXED") == "1" else 10)
    return 0


def _copy_out(stream, log) -> None:
    """A verifier's output to the box's own stdout (read and capped by the runner) and to its log."""
    for chunk in iter(lambda: stream.read1(65536), b""):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        log.write(chunk)


if __name__ == "__main__":
    sys.exit(main())
