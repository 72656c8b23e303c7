"""Hostile learner folders: each attack ends as FAIL, ERROR or TIMEOUT for that folder, changes nothing
outside its box, and the next folder is checked normally.

The forges run against lesson 01's real verifier (judged apart: the learner's api_states.py loads in a
probe, so the attack runs beside the judge, never in it) and, for the defences of lessons whose verifiers
still import learner code, against a small lesson whose verifier imports attack.py.  The rest use a small
lesson of their own whose verifier imports attack.py, with short limits.  The destructive attacks (kill -9 -1,
a fork bomb, a memory hog, a disk filler) run only after a probe has proved, from inside, that it is in a
working box; without one they are skipped with the reason and never run bare.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from checks import box
from checks.results import ERROR, NOT_PASSED, PASS, TIMEOUT
from checks.runner import run_lesson
from checks.sandbox import boxing
from checks.workdir import materialise
from shared import manifest
from tests.processes import alive_with

DATA = manifest.load()
KIT = manifest.KIT_ROOT
BOXED = boxing() == "on"
NO_BOX = f"no box on this machine ({box.availability()[1]}): a destructive attack is never run bare"


def _lesson01_with(tmp_path: Path, attack: str, extra: dict[str, str] | None = None):
    """The reference lesson-01 folder, with `attack` run first thing when api_states.py is imported."""
    folder = tmp_path / "learner"
    lesson = manifest.lesson("01", DATA)
    materialise(DATA["lessons"], lesson, folder)
    for verifier in (KIT / lesson["folder"] / "verifiers").glob("*.py"):
        (folder / verifier.name).unlink()
    source = (folder / "api_states.py").read_text(encoding="utf-8")
    (folder / "api_states.py").write_text(textwrap.dedent(attack) + "\n" + source, encoding="utf-8")
    for rel, text in (extra or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    work = materialise(DATA["lessons"], lesson, tmp_path / "work", lab=folder)
    return run_lesson(lesson, work, tmp_path / "logs", source=str(folder)), work


def _statuses(result) -> dict[str, str]:
    return {c.id: c.status for c in result.checks}


def _no_pass(result) -> None:
    assert all(c.status != PASS for c in result.checks if c.kind == "core"), _statuses(result)


# --- forging a pass ------------------------------------------------------------------------------

def test_printing_tap_lines_and_exiting_early_is_no_pass(tmp_path):
    attack = """
        import os, sys
        for n, cid in enumerate(("01.1", "01.2", "01.3", "01.4", "01.5"), 1):
            print(f"ok {n} - {cid}")
            print(f"@@ start {cid}")
        print("1..5"); sys.stdout.flush()
        os._exit(0)
    """
    result, _ = _lesson01_with(tmp_path, attack)
    _no_pass(result)


TAP_PATCH = textwrap.dedent("""
    import sys
    tap = sys.modules.get("shared.tap")
    if tap is not None:
        original = tap._Check.__exit__
        tap._Check.__exit__ = lambda self, *exc: original(self, None, None, None)
""")
FORK = textwrap.dedent("""
    import os
    if os.fork() == 0:  # the copy goes on as a second checker, reporting passes of its own
        OK = True
""")


def test_replacing_the_checkers_exit_is_tampering(tmp_path):
    """Where a verifier still imports learner code (lessons not yet judged apart), a patched checker is
    found out."""
    result, _ = _attack_lesson(tmp_path, TAP_PATCH + "\nraise RuntimeError('nothing implemented')\n")
    _no_pass(result)
    assert any("tampering" in c.message for c in result.checks), [c.message for c in result.checks]


def test_a_fork_of_the_checker_is_not_believed(tmp_path):
    """Code imported into a verifier forks: the copy runs the same checks and signs with the same key, yet
    it is not the process that launched as the verifier, so its verdicts make the run "tampering suspected"."""
    result, _ = _attack_lesson(tmp_path, FORK + "\nraise RuntimeError('nothing implemented')\n")
    _no_pass(result)
    assert any(c.tampered and "tampering" in c.message for c in result.checks), [c.message for c in result.checks]


@pytest.mark.parametrize("attack", [TAP_PATCH, FORK], ids=["patch-the-checker", "fork"])
def test_under_a_separate_judge_the_same_attacks_reach_nothing(tmp_path, attack):
    """Lesson 01 is judged apart: the learner's module loads in a probe, where neither the checker nor the
    verdict channel is; the attack is just learner code, and a module that does not load passes nothing."""
    assert manifest.lesson("01", DATA).get("judge") == "separate"
    result, _ = _lesson01_with(tmp_path, attack + "\nraise RuntimeError('nothing implemented')\n")
    _no_pass(result)
    assert not any(c.tampered for c in result.checks)
    assert all("nothing implemented" in c.message for c in result.checks if c.kind == "core"), \
        [c.message for c in result.checks]


def test_only_the_launched_verifier_and_inbox_may_speak_on_the_channel():
    from checks.verdicts import foreign
    good = [{"type": "inbox", "pid": 2}, {"type": "notice", "pid": 2}, {"type": "launch", "pid": 9},
            {"type": "start", "id": "a", "pid": 9}, {"type": "result", "id": "a", "pid": 9},
            {"type": "exit", "pid": 2}, {"type": "launch", "pid": 12}, {"type": "start", "id": "b", "pid": 12}]
    assert foreign(good) == 0
    assert foreign(good + [{"type": "result", "id": "b", "pid": 13}]) == 1           # a fork's verdict
    assert foreign(good + [{"type": "launch", "pid": 13}]) == 1                      # a fork calling itself one
    assert foreign(good[:5] + [{"type": "exit", "pid": 9}] + good[6:]) >= 1           # an exit not from inbox
    assert foreign([{"type": "inbox", "pid": 2}, {"type": "start", "id": "a", "pid": 2}]) == 1  # before any launch


def test_patching_sys_exit_and_os_exit_is_no_pass(tmp_path):
    attack = """
        import os, sys
        sys.exit = lambda *a: os._exit(0)
        os._exit = lambda *a: None
        raise RuntimeError("and the module itself does not load")
    """
    result, _ = _lesson01_with(tmp_path, attack)
    _no_pass(result)


@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_a_shared_package_or_site_hooks_in_the_folder_change_nothing(tmp_path):
    always_ok = """
        class Tap:
            def __init__(self): pass
            def check(self, cid): raise SystemExit(0)
        def main_guard(run): raise SystemExit(0)
    """
    extra = {"shared/__init__.py": "", "shared/tap.py": always_ok, "checks/__init__.py": "",
             "sitecustomize.py": "import os; os._exit(0)\n", "usercustomize.py": "import os; os._exit(0)\n",
             "hook.pth": "import os; os._exit(0)\n"}
    result, _ = _lesson01_with(tmp_path, "raise RuntimeError('nothing implemented')", extra)
    _no_pass(result)
    assert all("nothing implemented" in "\n".join([c.message, *c.notes]) for c in result.checks
               if c.kind == "core"), [c.message for c in result.checks]


@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_overwriting_the_verifier_in_the_copy_fails(tmp_path):
    attack = """
        import pathlib
        fake = "from shared.tap import Tap\\nt = Tap()\\nwith t.check('01.1'): pass\\n"
        for name in ("lab01_verify.py",):
            try:
                pathlib.Path(name).write_text(fake)
                print("OVERWROTE", name)
            except OSError as exc:
                print("refused:", exc)
        raise RuntimeError("nothing implemented")
    """
    result, work = _lesson01_with(tmp_path, attack)
    _no_pass(result)
    assert "with t.check" not in (work / "lab01_verify.py").read_text()


# --- reaching outside ----------------------------------------------------------------------------

def _secrets() -> list[str]:
    found = []
    for path in (KIT / ".env.tasks", KIT / ".state" / "services" / "root.env"):
        if path.is_file():
            for line in path.read_text().splitlines():
                if "=" in line and not line.startswith("#"):
                    value = line.split("=", 1)[1].strip()
                    if len(value) >= 12:
                        found.append(value)
    return found


@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_the_kits_secrets_home_and_other_folders_are_out_of_reach(tmp_path):
    canary = f"hostile-{uuid.uuid4().hex}"
    home_target = Path.home() / canary
    kit_target = KIT / canary
    tmp_target = Path("/tmp") / canary
    attack = f"""
        import json, os, pathlib
        seen = {{}}
        for path in ({str(KIT / '.env.tasks')!r}, {str(KIT / '.state' / 'services' / 'root.env')!r}, "/etc/shadow",
                     {str(Path.home() / '.bashrc')!r}):
            try:
                seen[path] = pathlib.Path(path).read_text()
            except OSError as exc:
                seen[path] = "refused: " + type(exc).__name__
        for target in ({str(home_target)!r}, {str(kit_target)!r}, {str(tmp_target)!r}):
            try:
                pathlib.Path(target).write_text("was here")
            except OSError as exc:
                seen[target] = "refused: " + type(exc).__name__
        pathlib.Path("seen.json").write_text(json.dumps(seen))
        raise RuntimeError("nothing implemented")
    """
    result, work = _lesson01_with(tmp_path, attack)
    _no_pass(result)
    for target in (home_target, kit_target, tmp_target):
        assert not target.exists(), target
    seen = json.loads((work / "seen.json").read_text())
    text = json.dumps(seen) + (tmp_path / "logs").joinpath("box.log").read_text(errors="replace")
    for secret in _secrets():
        assert secret not in text
    assert all(value in ("", ) or value.startswith("refused") for path, value in seen.items()
               if "shadow" in path or "bashrc" in path or "root.env" in path), seen


# --- the small lesson for the rest ---------------------------------------------------------------

VERIFIER = """
    import os
    from shared.tap import Tap, main_guard
    def main(tap):
        with tap.check("99.1"):
            import attack
            assert getattr(attack, "OK", False), "the attack module does not say OK"
    main_guard(main)
"""


def _attack_lesson(tmp_path: Path, attack: str, timeout: float = 8):
    kit = tmp_path / "kit" / "99-hostile"
    (kit / "verifiers").mkdir(parents=True)
    (kit / "verifiers" / "verify_hostile.py").write_text(textwrap.dedent(VERIFIER))
    lesson = {"id": "99", "slug": "hostile", "folder": str(kit), "status": "ready", "title": {"zh": "敌", "en": "x"},
              "group": {"zh": "组", "en": "g"}, "processes": [],
              "checks": [{"id": "99.1", "kind": "core", "text": {"zh": "x", "en": "x"}, "verifier": "verify_hostile.py",
                          "points": 1, "timeout": timeout, "hint": {"zh": "x", "en": "x"}}]}
    folder = tmp_path / "learner"
    folder.mkdir()
    (folder / "attack.py").write_text(textwrap.dedent(attack), encoding="utf-8")
    work = materialise([lesson], lesson, tmp_path / "work", lab=folder)
    return run_lesson(lesson, work, tmp_path / "logs", lessons=[lesson]), work


PROOF = """
    import json, os, socket, pathlib
    proof = {"uid": os.getuid(), "interfaces": [name for _, name in socket.if_nameindex()],
             "pid1": pathlib.Path("/proc/1/cmdline").read_bytes().split(b"\\0")[0].decode(),
             "kit_lab_hidden": not any(pathlib.Path(%r).iterdir()) if pathlib.Path(%r).exists() else True}
    pathlib.Path("proof.json").write_text(json.dumps(proof))
    OK = True
""" % (str(KIT / ".state"), str(KIT / ".state"))


def _proven_box(tmp_path: Path) -> dict:
    """Run the probe; the destructive tests go on only when it proves a working box from inside."""
    if not BOXED:
        pytest.skip(NO_BOX)
    result, work = _attack_lesson(tmp_path / "probe", PROOF)
    proof = json.loads((work / "proof.json").read_text())
    if not (result.checks[0].status == PASS and proof["uid"] == box.BOX_UID and proof["interfaces"] == ["lo"]
            and proof["kit_lab_hidden"] and proof["pid1"].endswith("bwrap")):
        pytest.skip(f"the box did not prove itself ({proof}): a destructive attack is never run bare")
    return proof


def test_only_loopback_is_visible_from_inside(tmp_path):
    proof = _proven_box(tmp_path)
    assert proof["interfaces"] == ["lo"] and proof["uid"] == box.BOX_UID


def _then_a_good_folder_still_passes(tmp_path: Path) -> None:
    result, _ = _attack_lesson(tmp_path / "after", "OK = True\n")
    assert result.checks[0].status == PASS, result.checks[0].message


def test_kill_everything_costs_only_that_folder(tmp_path):
    _proven_box(tmp_path)
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        attack = """
            import os, pathlib, signal
            for pid_file in pathlib.Path(%r).glob("*.pid"):
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            os.kill(-1, signal.SIGKILL)
        """ % str(KIT / ".state" / "services")
        result, _ = _attack_lesson(tmp_path / "a", attack)
        assert result.checks[0].status in NOT_PASSED
        assert sentinel.poll() is None, "a process outside the box was killed"
    finally:
        sentinel.kill()
        sentinel.wait()
    _then_a_good_folder_still_passes(tmp_path)


def test_a_fork_bomb_is_contained(tmp_path):
    _proven_box(tmp_path)
    marker = f"bomb-{uuid.uuid4().hex}"
    attack = f"""
        import os, sys
        children = 0
        while children < 100000:
            try:
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)  # {marker}"])
                children += 1
            except OSError:
                break
    """
    result, _ = _attack_lesson(tmp_path / "a", attack)
    assert result.checks[0].status in NOT_PASSED
    assert alive_with(marker) == []
    _then_a_good_folder_still_passes(tmp_path)


def test_a_memory_hog_is_contained(tmp_path):
    _proven_box(tmp_path)
    if os.geteuid() != 0:
        pytest.skip("memory is capped by a cgroup only when the kit runs as root (else RLIMIT_AS, not tested here)")
    attack = """
        hog = []
        while True:
            hog.append(bytearray(64 * 1024 * 1024))
    """
    result, _ = _attack_lesson(tmp_path / "a", attack, timeout=20)
    assert result.checks[0].status in NOT_PASSED
    _then_a_good_folder_still_passes(tmp_path)


def test_an_endless_loop_times_out(tmp_path):
    result, _ = _attack_lesson(tmp_path, "while True:\n    pass\n", timeout=2)
    assert result.checks[0].status == TIMEOUT


def test_an_endless_loop_at_import_costs_one_check_not_every_check(tmp_path, monkeypatch):
    """After the first check runs out of time, each module is imported alone once; the one that never
    finishes is named, and the checks after it are errors with that one message instead of timeouts."""
    monkeypatch.setenv("LAB_LANG", "en")
    kit = tmp_path / "kit" / "99-loop"
    (kit / "verifiers").mkdir(parents=True)
    (kit / "verifiers" / "verify_loop.py").write_text(textwrap.dedent("""
        from shared.tap import main_guard
        def main(tap):
            for check_id in ("99.1", "99.2", "99.3"):
                with tap.check(check_id):
                    import loop
                    assert loop.OK
        main_guard(main)
    """))
    check = {"kind": "core", "text": {"zh": "x", "en": "x"}, "verifier": "verify_loop.py", "points": 1,
             "timeout": 3, "hint": {"zh": "x", "en": "x"}}
    lesson = {"id": "99", "slug": "loop", "folder": str(kit), "status": "ready", "title": {"zh": "环", "en": "x"},
              "group": {"zh": "组", "en": "g"}, "processes": [], "files": ["loop.py", "fine.py"],
              "checks": [dict(check, id=f"99.{n}") for n in (1, 2, 3)]}
    folder = tmp_path / "learner"
    folder.mkdir()
    (folder / "loop.py").write_text("OK = True\nwhile True:\n    pass\n", encoding="utf-8")
    (folder / "fine.py").write_text("OK = True\n", encoding="utf-8")
    work = materialise([lesson], lesson, tmp_path / "work", lab=folder)
    result = run_lesson(lesson, work, tmp_path / "logs", lessons=[lesson])
    first, *rest = result.checks
    assert first.status == TIMEOUT
    for later in rest:
        assert later.status == ERROR and "importing loop.py never finishes" in later.message, later.message
    assert len(result.problems) == 1 and "loop.py" in result.problems[0]


def test_an_output_flood_is_stopped(tmp_path):
    attack = """
        import sys
        line = "x" * 1023 + "\\n"
        for _ in range(100 * 1024):
            sys.stdout.write(line)
    """
    result, _ = _attack_lesson(tmp_path, attack, timeout=60)
    check = result.checks[0]
    assert check.status == ERROR and "1 MB" in check.message, check.message
    assert (tmp_path / "logs" / "box.log").stat().st_size <= box.OUTPUT_LIMIT + 64 * 1024


def test_a_daemon_left_running_is_gone_after_the_run(tmp_path):
    marker = f"daemon-{uuid.uuid4().hex}"
    attack = f"""
        import os, subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # {marker}"],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        OK = True
    """
    _attack_lesson(tmp_path, attack)
    assert alive_with(marker) == []


def test_filling_the_disk_is_stopped(tmp_path):
    _proven_box(tmp_path)
    attack = """
        import os
        block = b"\\0" * (16 * 1024 * 1024)
        n = 0
        while True:
            with open(f"fill-{n}.bin", "wb") as f:
                for _ in range(8):
                    f.write(block)
            n += 1
    """
    result, work = _attack_lesson(tmp_path / "a", attack, timeout=60)
    assert result.checks[0].status in NOT_PASSED
    written = sum(p.stat().st_size for p in work.glob("fill-*.bin"))
    assert written <= box.DISK_LIMIT + 2 * 1024 ** 3, written
    for p in work.glob("fill-*.bin"):
        p.unlink()
    _then_a_good_folder_still_passes(tmp_path)


# --- the folder scan -----------------------------------------------------------------------------

def test_a_folder_reaching_into_the_checker_is_flagged_and_never_passes(tmp_path):
    from checks import tamper
    from checks.session import run_many
    lesson = manifest.lesson("01", DATA)
    clean = tmp_path / "clean"
    shutil.copytree(KIT / lesson["folder"], clean)  # the kit's folder as is, verifiers/ included
    assert tamper.scan(clean) == []
    sneaky = tmp_path / "sneaky"
    shutil.copytree(clean, sneaky)
    with open(sneaky / "api_states.py", "a", encoding="utf-8") as stream:
        stream.write("\nimport sys\nchecker = sys.modules['shared.tap']\n")
    findings = tamper.scan(sneaky)
    assert findings and findings[0].file == "api_states.py"
    [result] = run_many([lesson], DATA, sneaky, "hostile-scan")
    assert {c.status for c in result.checks} == {ERROR} and all(c.tampered for c in result.checks)
    assert "tampering suspected" in result.checks[0].message


@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_a_class_with_hostile_folders_is_graded_and_the_good_folder_passes(tmp_path):
    """Four folders graded two at a time: one floods its output, one kills its own box, one is missing;
    the good one gets full marks and every folder gets its JSON and JUnit report."""
    from checks import cli
    lesson = manifest.lesson("01", DATA)
    good = tmp_path / "class" / "good" / "tasks_lab"
    shutil.copytree(KIT / lesson["folder"], good, ignore=shutil.ignore_patterns("verifiers", "README.md"))
    flood = tmp_path / "class" / "flood" / "tasks_lab"
    shutil.copytree(good, flood)
    (flood / "api_states.py").write_text("import sys\nfor _ in range(200000):\n"
                                         "    sys.stdout.write('x' * 1000 + '\\n')\n")
    killer = tmp_path / "class" / "killer" / "tasks_lab"
    shutil.copytree(good, killer)
    (killer / "api_states.py").write_text("import os, signal\nos.kill(-1, signal.SIGKILL)\n")
    out = tmp_path / "grades"
    code = cli.main(["grade", "--lab", str(good), str(flood), str(killer), str(tmp_path / "class" / "missing"),
                     "--lessons", "01", "--out", str(out), "-j", "2"])
    assert code == 1
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(reports) == {"good", "flood", "killer", "missing"} and len(list(out.glob("*.xml"))) == 4
    assert reports["good"]["score"] == reports["good"]["max_score"] > 0
    for name in ("flood", "killer", "missing"):
        assert reports[name]["score"] == 0 and reports[name]["max_score"] == reports["good"]["max_score"], name


def test_the_mariadb_template_is_made_once_when_many_runs_ask_at_once(tmp_path):
    """A fresh clone's parallel test workers all want the template at the same moment: one makes it
    (its temporary tables in a folder of its own), the others wait and use it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    if shutil.which("mariadb-install-db") is None:
        pytest.skip("no mariadb-install-db (as root: apt-get install -y mariadb-server)")
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:  # no fork of threads
        made = list(pool.map(box.mariadb_template, [tmp_path] * 3))
    assert len(set(made)) == 1 and (made[0] / "mysql").is_dir()
    assert [p.name for p in made[0].parent.iterdir() if p.name.endswith((".tmp", ".scratch"))] == []


def test_the_mariadb_template_is_made_where_the_path_has_a_space(tmp_path):
    """mariadb-install-db hands its paths to chown unquoted: a kit cloned into "My Projects" failed here."""
    if shutil.which("mariadb-install-db") is None:
        pytest.skip("no mariadb-install-db (as root: apt-get install -y mariadb-server)")
    made = box.mariadb_template(tmp_path / "My Projects" / "套件")
    assert (made / "mysql").is_dir()


def test_a_full_disk_while_the_template_is_made_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A full disk (a WSL2 disk image fills too) printed a 30 KB shutil.Error, one entry per file, and
    left the half-copied template behind."""
    from shared import services_native
    if shutil.which("mariadb-install-db") is None:
        pytest.skip("no mariadb-install-db (as root: apt-get install -y mariadb-server)")
    monkeypatch.setenv("LAB_LANG", "en")

    def full_disk(src, dst):
        (Path(dst) / "mysql").mkdir(parents=True)     # what a copy managed before the disk filled
        raise shutil.Error([(f"{src}/ibdata1", f"{dst}/ibdata1", "[Errno 28] No space left on device"),
                            (f"{src}/aria_log", f"{dst}/aria_log", "[Errno 28] No space left on device")])

    monkeypatch.setattr(services_native.shutil, "move", full_disk)
    with pytest.raises(box.BoxUnavailable) as raised:
        box.mariadb_template(tmp_path)
    assert str(raised.value).count("No space left on device") == 1 and "could not be moved into" in str(raised.value)
    assert [p.name for p in (tmp_path / box.TEMPLATES).iterdir() if not p.name.endswith(".lock")] == []


def test_each_box_gets_a_cpu_group_of_its_own_beside_its_limits():
    """The scheduler shares the CPU between boxes, not processes: a fork bomb's thousand busy processes
    weigh one box (seen grading a class at -j 4: without it, the load reached 700 and every box slowed)."""
    if os.geteuid() != 0 or not (box.CGROUP_ROOT / "cpu" / "cgroup.procs").exists():
        pytest.skip("box cgroups are made only as root on cgroup v1 with the cpu controller")
    groups = box.make_cgroups()
    try:
        by_controller = {g.parent.name: g for g in groups}
        assert set(by_controller) == {"pids", "memory", "cpu"}
        assert (by_controller["cpu"] / "cpu.shares").read_text().strip() == "1024"
        assert (by_controller["pids"] / "pids.max").read_text().strip() == str(box.PIDS_LIMIT)
    finally:
        box.remove_cgroups(groups)
    assert not any(g.exists() for g in groups)
