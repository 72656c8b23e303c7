"""shared/forkserver.py and shared/warm.py: a program forked warm is the process a cold `python ARGV` would have been.

Each test asks from a process of its own (an asker started here), so no fork server outlives it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent

# The asker: runs each command of argv[1] (JSON) through shared.proc.run_python and prints what came back.
ASK = textwrap.dedent("""
    import json, os, sys
    from shared.proc import run_python
    out = []
    for args in json.loads(sys.argv[1]):
        done = run_python(args, cwd=sys.argv[2], timeout=60, env=dict(os.environ, **json.loads(sys.argv[3])))
        out.append([done.returncode, done.stdout])
    print(json.dumps({"asker": os.getpid(), "runs": out}))
""")

# A program that says what a cold start would have made of it; its folder imports celery (warm: preloaded).
SAYS = textwrap.dedent("""
    import os, sys
    print(sys.argv, sys.path[0], __file__, __name__, os.getcwd(), os.environ.get("SAID"), os.getppid() > 1)
    print("preloaded", "celery" in sys.modules)
    if len(sys.argv) > 1 and sys.argv[1] == "fail":
        raise ValueError("as asked")
    if len(sys.argv) > 1 and sys.argv[1] == "interrupt":
        import signal
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(3)
    import celery  # never reached: only read by the server, which warms Celery for this folder
""")


def ask(folder: Path, commands: list[list[str]], env: dict | None = None, warm: bool = True) -> dict:
    done = subprocess.run([sys.executable, "-c", ASK, json.dumps(commands), str(folder), json.dumps(env or {})],
                          cwd=KIT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(KIT), TASKLAB_FORKSERVER="1" if warm else "0"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def folder_with(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)
    return folder


def test_a_warm_program_sees_what_a_cold_one_sees_but_starts_with_celery_imported(tmp_path):
    folder = folder_with(tmp_path, says__py=SAYS)
    commands = [["says.py", "a b", "c"], ["-c", "import sys; print(sys.argv, repr(sys.path[0]))", "x"],
                ["-m", "says"], ["says.py", "fail"], ["says.py", "interrupt"], ["-m", "no_such_module"],
                ["missing.py"]]
    cold = ask(folder, commands, {"SAID": "yes"}, warm=False)["runs"]
    warm = ask(folder, commands, {"SAID": "yes"})["runs"]
    assert "preloaded False" in cold[0][1] and "preloaded True" in warm[0][1]
    for (cold_code, cold_out), (warm_code, warm_out) in zip(cold, warm, strict=True):
        assert warm_code == cold_code and warm_out.replace("preloaded True", "preloaded False") == cold_out
    assert cold[0][0] == 3 and cold[3][0] == 1 and cold[4][0] == -signal.SIGINT
    # the traceback starts at the program, as a cold one's does: no frame of the fork server
    assert 'File "' + str(folder / "says.py") + '"' in warm[3][1] and "forkserver" not in warm[3][1]


def test_a_learner_module_named_like_a_warm_package_is_what_the_program_imports(tmp_path):
    # A `celery.py` in the learner's folder shadows the real Celery for a cold start: so it must warm.
    folder = folder_with(tmp_path, celery__py="WHO = 'the learner'\n",
                         uses__py="import sys\nprint('preloaded', 'kombu' in sys.modules)\n"
                                  "import celery\nprint(getattr(celery, 'WHO', 'the real one'))\n")
    [[code, out]] = ask(folder, [["uses.py"]])["runs"]
    assert code == 0 and "the learner" in out and "preloaded False" in out


def test_a_learner_module_named_like_one_the_server_itself_loaded_is_what_the_program_imports(tmp_path):
    # The server imports json and socket for its own work: a learner's `json.py` must still be the one found.
    folder = folder_with(tmp_path, json__py="WHO = 'the learner'\n",
                         uses__py="import json\nprint(getattr(json, 'WHO', 'the standard one'))\n")
    [[_, out]] = ask(folder, [["uses.py"]])["runs"]
    assert "the learner" in out, out
    # And the server's own helper module is not there for a warm program to import.
    other = tmp_path / "other"
    other.mkdir()
    (other / "helper.py").write_text("import sys, celery\nprint('preloaded', 'kombu' in sys.modules)\n"
                                     "import warm_imports\n")
    [[code, out]] = ask(other, [["helper.py"]])["runs"]
    assert code != 0 and "preloaded True" in out and "No module named 'warm_imports'" in out, out


def test_an_environment_read_while_warming_that_differs_starts_cold(tmp_path):
    # kombu reads KOMBU_LOG_CONNECTION when imported: a program given another value must import it itself.
    folder = folder_with(tmp_path, says__py=SAYS)
    runs = ask(folder, [["says.py"], ["says.py"]], {"KOMBU_LOG_CONNECTION": "1"})["runs"]
    assert all("preloaded False" in out for _, out in runs), runs


def test_the_program_is_the_askers_own_child_and_says_its_own_command_line(tmp_path):
    folder = folder_with(tmp_path, says__py=SAYS, pool__py=textwrap.dedent("""
        import os, celery
        from concurrent.futures import ProcessPoolExecutor
        def square(x):
            return x * x
        if __name__ == "__main__":
            with ProcessPoolExecutor(2) as pool:
                print(list(pool.map(square, range(4))))
            print("parent", os.getppid())
            print(open("/proc/self/cmdline", "rb").read().rstrip(b"\\0").split(b"\\0"))
    """))
    said = ask(folder, [["pool.py", "an argument"]])
    [[code, out]] = said["runs"]
    assert code == 0 and "[0, 1, 4, 9]" in out, out
    assert f"parent {said['asker']}" in out
    assert str([sys.executable.encode(), b"pool.py", b"an argument"]) in out


def test_a_stopped_warm_process_reports_the_signal_and_its_group_goes_with_it(tmp_path):
    script = textwrap.dedent("""
        import os, signal, sys, time
        from shared.proc import Process
        proc = Process([sys.executable, "-c", "import celery, time; print('up', flush=True); time.sleep(60)"],
                       cwd=sys.argv[1], log_path=os.path.join(sys.argv[1], "p.log"))
        proc.wait_ready(30, log_contains="up")
        ppid = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[1]
        print(proc.pid != os.getpid(), int(ppid) == os.getpid(), os.getpgid(proc.pid) == proc.pid, proc.stop(grace=5))
    """)
    folder = folder_with(tmp_path, says__py=SAYS)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], cwd=KIT, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(KIT), TASKLAB_FORKSERVER="1"))
    assert done.stdout.split() == ["True", "True", "True", str(-signal.SIGTERM)], done.stdout + done.stderr


def test_pass_fds_arrive_at_their_own_numbers_and_nothing_else_is_open(tmp_path):
    # The probe hands its probe server two pipe ends this way (shared/probe.py).
    script = textwrap.dedent("""
        import json, os, sys
        from shared.warm import WarmPopen
        read_end, write_end = os.pipe()
        spare = os.open(os.devnull, os.O_RDONLY)  # open here, not passed: the child must not have it
        child = WarmPopen([sys.executable, "-c", "import json, os, sys; warm = 'celery' in sys.modules; "
                           "import celery; open_fds = sorted(int(f) for f in os.listdir('/proc/self/fd')); "
                           "os.write(int(sys.argv[1]), json.dumps([open_fds, warm]).encode())",
                           str(write_end)], cwd=sys.argv[1], pass_fds=(write_end,))
        os.close(write_end)
        open_fds, warm = json.loads(os.read(read_end, 500))
        print(json.dumps({"code": child.wait(), "open": open_fds, "warm": warm, "passed": write_end}))
    """)
    folder = folder_with(tmp_path, says__py=SAYS)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], cwd=KIT, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(KIT), TASKLAB_FORKSERVER="1"))
    said = json.loads(done.stdout or "{}")
    assert said.get("code") == 0 and said["warm"], done.stdout + done.stderr
    # 0-2, the passed one at its own number, and the one that listed /proc/self/fd: nothing else
    others = set(said["open"]) - {0, 1, 2, said["passed"]}
    assert said["passed"] in said["open"] and len(others) == 1, said


def test_a_module_an_argument_names_is_read_for_what_to_warm(tmp_path):
    # As the probe server is started: -I, given the folder it will add to its path and the module its first
    # request names; that module imports Celery, so the program starts with Celery imported.
    extra = tmp_path / "kit_probes"
    extra.mkdir()
    (extra / "first_probe.py").write_text("import celery\n")
    folder = folder_with(tmp_path, says__py=SAYS,
                         starts__py="import sys\nprint('preloaded', 'celery' in sys.modules)\n")
    assert ask(folder, [["-I", "starts.py", str(extra), "first_probe"]])["runs"] == [[0, "preloaded True\n"]]
    assert ask(folder, [["-I", "starts.py", str(extra)]])["runs"] == [[0, "preloaded False\n"]]
