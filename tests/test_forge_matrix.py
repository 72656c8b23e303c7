"""A folder that implements nothing, with a generic patch of the standard library or of the kit's own
objects found at run time, passes no core check of a lesson judged apart (tasks.json "judge":
"separate"): the patch runs wherever learner code runs — in probes, scripts and servers — and none of
those is the judge.

Each patch goes at the top of every Python file the lesson asks for (and nothing else is in them), so
it runs first whichever of them the checks load.  The patches are the kinds that forged verdicts where
learner code shared the judge's process: rewriting JSON, HMAC, print/stdout and os.write, exit and
excepthook, the clocks, and finding the kit's writer, checker and channel through sys.modules and gc.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest

DATA = manifest.load()

PATCHES = {
    "json-dumps": """
        import json
        _dumps = json.dumps
        def dumps(obj, *a, **k):
            text = _dumps(obj, *a, **k)
            return text.replace('"fail"', '"pass"').replace('"raised"', '"value"')
        json.dumps = dumps
    """,
    "json-encoder": """
        import json
        _encode = json.JSONEncoder.encode
        json.JSONEncoder.encode = lambda self, o: _encode(self, o).replace('"fail"', '"pass"')
    """,
    "hmac": """
        import hmac
        hmac.compare_digest = lambda a, b: True
        _new = hmac.new
        hmac.new = lambda key, msg=None, digestmod=None: _new(b"k" * 32, msg, digestmod)
    """,
    "os-write": """
        import os
        _write = os.write
        os.write = lambda fd, data: _write(fd, bytes(data).replace(b'"fail"', b'"pass"').replace(b"not ok", b"ok"))
    """,
    "print-and-stdout": """
        import builtins, sys
        _print = builtins.print
        builtins.print = lambda *a, **k: _print(*(str(x).replace("not ok", "ok") for x in a), **k)
        class Out:
            def __init__(self, inner): self.inner = inner
            def write(self, s): return self.inner.write(s.replace("not ok", "ok"))
            def __getattr__(self, name): return getattr(self.inner, name)
        sys.stdout = Out(sys.stdout)
    """,
    "exit-zero": """
        import atexit, os, sys
        atexit.register(lambda: os._exit(0))
        sys.exit = lambda *a: os._exit(0)
        sys.excepthook = lambda *a: os._exit(0)
    """,
    "clock": """
        import time
        _start = time.monotonic()
        time.monotonic = lambda: _start
        time.time = lambda: 0.0
        time.sleep = lambda s: None
    """,
    "sys-modules-writer": """
        import sys
        for module in list(sys.modules.values()):
            channel = getattr(module, "_channel", None)
            if channel is not None and hasattr(channel, "send"):
                for n in range(1, 20):
                    for lesson in range(1, 17):
                        try:
                            channel.send({"type": "result", "id": f"{lesson:02d}.{n}", "status": "pass", "notes": [],
                                          "message": "", "seconds": 0.0, "figures": [], "intact": True})
                        except Exception:
                            pass
    """,
    "gc-kit-objects": """
        import gc
        for obj in gc.get_objects():
            try:
                kind = type(obj).__name__
                if kind in ("Signer", "Tap", "_Check", "Reader", "Probe"):
                    for name in ("failed", "forged"):
                        if hasattr(obj, name):
                            setattr(obj, name, 0)
                    if hasattr(obj, "send"):
                        obj.send({"type": "result", "id": "01.1", "status": "pass", "notes": [], "message": "",
                                  "seconds": 0.0, "figures": [], "intact": True})
            except Exception:
                pass
    """,
    "proc-fds": """
        import os
        # Every descriptor this process can find, its own and its parent's: write a pass on each.
        record = b'{"type": "result", "id": "01.1", "status": "pass"}\\nok 1 - 01.1\\n'
        for pid in ("self", str(os.getppid())):
            try:
                names = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for name in names:
                try:
                    fd = os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK)
                    os.write(fd, record)
                    os.close(fd)
                except OSError:
                    pass
    """,
}

SEPARATE = [lesson["id"] for lesson in DATA["lessons"] if lesson.get("judge") == "separate"]


def _nothing_but(tmp_path: Path, lesson: dict, patch: str) -> Path:
    folder = tmp_path / "learner"
    folder.mkdir()
    for name in lesson.get("files", []):
        if name.endswith(".py"):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(textwrap.dedent(patch), encoding="utf-8")
    return folder


NAMED = ("01", "02", "04", "11", "13")  # the lessons: every patch, every run
FEW = ("json-dumps", "sys-modules-writer", "gc-kit-objects")  # the rest: the strongest few (all with LAB_TEST_ALL=1)
PAIRS = [(lid, patch) for lid in SEPARATE for patch in sorted(PATCHES)
         if lid in NAMED or patch in FEW or os.environ.get("LAB_TEST_ALL") == "1"]


@pytest.mark.parametrize("lesson_id,patch", PAIRS)
def test_a_folder_that_implements_nothing_passes_no_core_check(tmp_path, lesson_id, patch):
    lesson = manifest.lesson(lesson_id, DATA)
    folder = _nothing_but(tmp_path, lesson, PATCHES[patch])
    work = materialise(DATA["lessons"], lesson, tmp_path / "work", lab=folder)
    # The lesson's own core checks are what is judged here: its regressions (the earlier lessons' checks, each
    # in a box of its own) are forged at in those lessons' rows.
    core = {c["id"] for c in lesson["checks"] if c["kind"] == "core"}
    result = run_lesson(lesson, work, tmp_path / "logs", source=str(folder), lessons=DATA["lessons"], only=core)
    passed = [c.id for c in result.checks if c.kind == "core" and not c.regression and c.status == PASS]
    assert not passed, {c.id: (c.status, c.message[:200]) for c in result.checks}
    assert {c.id for c in result.checks if c.id in core and c.status != "skipped"} == core  # each one judged


def test_every_lesson_is_judged_apart():
    """A new lesson is judged apart too, and so enters this matrix."""
    assert SEPARATE == [lesson["id"] for lesson in DATA["lessons"] if lesson["status"] == "ready"]


REACH = """
    import json, os
    def reach(pid):
        seen = {}
        for what in ("fd", "mem", "environ"):
            try:
                if what == "fd":  # the names may be listed; opening one is what would matter
                    opened = []
                    for name in os.listdir(f"/proc/{pid}/fd"):
                        try:
                            os.close(os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK))
                            opened.append(name)
                        except OSError as exc:
                            last = type(exc).__name__
                    seen[what] = opened or last
                else:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        seen[what] = len(f.read(16))
            except OSError as exc:
                seen[what] = type(exc).__name__
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            seen["ptrace"] = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH: -1 when refused
        except Exception as exc:
            seen["ptrace"] = type(exc).__name__
        return seen
    found = {"judge": reach(os.getppid())}  # the judge: a probe is its child
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):  # and every fork server in the box
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"forkserver.py" in f.read():
                    found[f"fork server {pid}"] = reach(int(pid))
        except OSError:
            pass
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        judge = f.read().decode(errors="replace")
    with open("reach.json", "w") as out:
        json.dump({"found": found, "judge": judge}, out)
"""


def test_learner_code_cannot_reach_into_the_judge(tmp_path):
    """From the probe (the judge's own child, the closest learner code gets): no descriptor list, memory or
    environment of the judge, nor of the fork servers judges and their programs are forked from, and no
    ptrace."""
    import json
    lesson = manifest.lesson("01", DATA)
    folder = _nothing_but(tmp_path, lesson, REACH)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work", lab=folder)
    run_lesson(lesson, work, tmp_path / "logs", source=str(folder), lessons=DATA["lessons"])
    reached = json.loads((work / "reach.json").read_text())
    found = reached["found"]
    refused = {"fd": "PermissionError", "mem": "PermissionError", "environ": "PermissionError", "ptrace": -1}
    # and the box's fork server (judges are forked from it) and the judge's own, when warm starts are on
    servers = 2 if os.environ.get("TASKLAB_FORKSERVER", "1") == "1" else 0
    assert len(found) >= 1 + servers and all(seen == refused for seen in found.values()), found
    if servers:  # the judge was forked warm, from the box's server (checks/judge.py run_forked)
        assert "checks/judge.py" in reached["judge"], reached["judge"]


def test_a_judge_that_imports_from_the_folder_after_all_is_not_believed(tmp_path):
    """Fail closed on the kit's own mistake: a verifier judged apart that puts the folder on its path and
    imports learner code has its verdicts flagged, never counted as passes."""
    kit = tmp_path / "kit" / "98-judge"
    (kit / "verifiers").mkdir(parents=True)
    (kit / "verifiers" / "verify_judge.py").write_text(textwrap.dedent("""
        import os, sys
        from shared.tap import main_guard

        def main(tap):
            with tap.check("98.1"):
                sys.path.insert(0, os.getcwd())
                import learner_module  # noqa: F401

        main_guard(main)
    """))
    lesson = {"id": "98", "slug": "judge", "folder": str(kit), "status": "ready", "judge": "separate",
              "title": {"zh": "判", "en": "j"}, "group": {"zh": "组", "en": "g"}, "processes": [],
              "checks": [{"id": "98.1", "kind": "core", "text": {"zh": "x", "en": "x"}, "verifier": "verify_judge.py",
                          "points": 1, "timeout": 10, "hint": {"zh": "x", "en": "x"}}]}
    folder = tmp_path / "learner"
    folder.mkdir()
    (folder / "learner_module.py").write_text("OK = True\n", encoding="utf-8")
    work = materialise([lesson], lesson, tmp_path / "work", lab=folder)
    result = run_lesson(lesson, work, tmp_path / "logs", lessons=[lesson])
    assert [c.status for c in result.checks] != [PASS], [(c.status, c.message) for c in result.checks]
