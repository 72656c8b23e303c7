"""Hostile folders against the host, not the box: what the grader does before a box starts and after it
ends.  Each attack of issue 22, rebuilt from its description, must end contained: the host file, marker
or other student untouched, no pass gained, the rest of the class graded.

The host-side attacks need no box (the folder is refused before anything runs).  The ones whose code
runs in a box (a planted link in the log folder, a flood on the verdict channel) are skipped where no
box can be made: such code is never run bare.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from checks import box, cli, grade
from checks.results import PASS
from checks.sandbox import boxing
from checks.workdir import STATE_DIR
from shared import manifest
from tests.folders import learner_folder
from tests.processes import alive_with, marker

DATA = manifest.load()
KIT = manifest.KIT_ROOT
LESSON = manifest.lesson("01", DATA)
BOXED = boxing() == "on"
NO_BOX = f"no box on this machine ({box.availability()[1]}): code written to attack is never run bare"
GIT_ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")


def _good(folder: Path) -> Path:
    return learner_folder(folder)


def _with_attack(folder: Path, attack: str) -> Path:
    """A faithful lesson-01 folder whose api_states.py runs `attack` first when it is imported."""
    _good(folder)
    source = (folder / "api_states.py").read_text(encoding="utf-8")
    (folder / "api_states.py").write_text(textwrap.dedent(attack) + "\n" + source, encoding="utf-8")
    return folder


def _grade(tmp_path: Path, folders: list[Path], *extra: str) -> dict[str, dict]:
    out = tmp_path / "grades"
    cli.main(["grade", "--lab", *map(str, folders), "--lessons", "01", "--out", str(out), "-j", "2", *extra])
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def _full(report: dict) -> bool:
    return report["score"] == report["max_score"] > 0


def _untouched(path: Path, content: bytes, mode: int) -> None:
    assert path.read_bytes() == content and stat.S_IMODE(path.stat().st_mode) == mode, path


def _host_file(tmp_path: Path, name: str = "host-secret.txt") -> tuple[Path, bytes]:
    path = tmp_path / "host" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    content = b"SECRET-LINE password=hunter2-" + os.urandom(4).hex().encode() + b"\n"
    path.write_bytes(content)
    path.chmod(0o600)
    return path, content


# --- 4, 5, 6, 7: links, special files and sparse files in the folder are refused as data ---------------

def test_links_special_and_sparse_files_are_refused_and_the_class_still_graded(tmp_path):
    """A link named like a kit verifier (4), a FIFO and a /proc/kmsg link (5), a link to a root-only file
    (6), a 1 GiB sparse file (7): each folder is refused with one error naming the path, nothing it points
    at is read or written, and the good folder beside them gets full marks — all within seconds."""
    secret, content = _host_file(tmp_path)
    folders = {name: _good(tmp_path / "class" / name / "tasks_lab") for name in
               ("good", "verifier-link", "fifo", "kmsg", "secret-link", "sparse")}
    (folders["verifier-link"] / "lab01_verify.py").symlink_to(secret)
    os.mkfifo(folders["fifo"] / "notes.py")
    (folders["kmsg"] / "notes.py").symlink_to("/proc/kmsg")
    (folders["secret-link"] / "notes.py").symlink_to(secret)
    with open(folders["sparse"] / "data.bin", "wb") as f:
        f.truncate(1 << 30)
    started = time.monotonic()
    reports = _grade(tmp_path, list(folders.values()))
    assert time.monotonic() - started < 60
    assert _full(reports["good"])
    for name, path in (("verifier-link", "lab01_verify.py"), ("fifo", "notes.py"), ("kmsg", "notes.py"),
                       ("secret-link", "notes.py"), ("sparse", "data.bin")):
        r = reports[name]
        assert r["score"] == 0 and r["max_score"] == reports["good"]["max_score"], name
        assert path in r["message"], (name, r["message"])
    _untouched(secret, content, 0o600)
    text = "".join(p.read_text() for p in (tmp_path / "grades").iterdir())
    assert "SECRET-LINE" not in text and "hunter2" not in text
    assert not list((STATE_DIR / "work" / "grade").glob(f"{grade.TEMP_PREFIX}{os.getpid()}-*"))  # cleaned


# --- 1, 2: --at reads the learner's objects and nothing else -------------------------------------------

def _repo(folder: Path, tag: str = "lesson-01") -> Path:
    _good(folder)
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "one"],
                 ["tag", tag]):
        subprocess.run(["git", "-C", str(folder), *argv], check=True, env=GIT_ENV, capture_output=True)
    return folder


def test_at_runs_no_filter_and_follows_no_gitdir_of_the_learner(tmp_path):
    marker_file = tmp_path / "host" / "filter-ran"
    marker_file.parent.mkdir()
    good = _repo(tmp_path / "class" / "good" / "tasks_lab")
    filtered = _repo(tmp_path / "class" / "filter" / "tasks_lab")
    (filtered / ".gitattributes").write_text("* filter=x\n")
    for key in ("smudge", "clean", "process"):
        subprocess.run(["git", "-C", str(filtered), "config", f"filter.x.{key}", f'sh -c "id > {marker_file}; cat"'],
                       check=True, env=GIT_ENV)
    subprocess.run(["git", "-C", str(filtered), "config", "core.fsmonitor", f"sh -c 'id > {marker_file}'"], check=True)
    broken = _good(tmp_path / "class" / "redirect" / "tasks_lab")
    (broken / "api_states.py").write_text("raise RuntimeError('nothing implemented')\n")
    (broken / ".git").write_text(f"gitdir: {good / '.git'}\n")
    reports = _grade(tmp_path, [good, filtered, broken], "--at", "lesson-{NN}")
    assert not marker_file.exists()
    assert _full(reports["good"]) and _full(reports["filter"])  # its own committed code, no filter applied
    assert reports["redirect"]["score"] == 0 and "gitdir" in json.dumps(reports["redirect"])


# --- 3, 4: nothing a box can write is a way to the host's files -----------------------------------------

@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_links_planted_in_the_log_and_work_folders_reach_no_host_file(tmp_path):
    """Code in the box swaps its box.log (which the host appends to afterwards), a hung-imports answer and
    every file it can name for links to a host file: the host file is never written, its mode never
    changed, and the good folder graded beside it passes."""
    target, content = _host_file(tmp_path, "host-file.txt")
    attack = f"""
        import os
        logs = os.environ.get("TASKLAB_LOG_DIR", ".")
        for folder, name in ((logs, "box.log"), (logs, "hung-imports.json"), (".", "lab01_verify.py"),
                             (".", "api_states.py"), (logs, "lab01_verify.log")):
            path = os.path.join(folder, name)
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                os.symlink({str(target)!r}, path)
            except OSError:
                pass
        print("PLANTED-LINE written to the log")
        raise RuntimeError("nothing implemented")
    """
    hostile = _with_attack(tmp_path / "class" / "planter" / "tasks_lab", attack)
    good = _good(tmp_path / "class" / "good" / "tasks_lab")
    reports = _grade(tmp_path, [hostile, good])
    _untouched(target, content, 0o600)
    assert _full(reports["good"]) and reports["planter"]["score"] == 0


@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_a_line_without_end_on_the_verdict_channel_stops_that_folder_promptly(tmp_path):
    """100 MB with no newline written to every pipe the learner's process holds (lesson 01 is judged apart:
    the probe's answer pipe, never the verdict channel): the judge keeps no more than one answer's worth
    and fails the check at once; the good folder passes.  (The verdict channel's own bound: below.)"""
    attack = """
        import os
        block = b"x" * (1 << 20)
        for fd in range(3, 64):
            try:
                for _ in range(100):
                    os.write(fd, block)
            except OSError:
                pass
        raise RuntimeError("nothing implemented")
    """
    flood = _with_attack(tmp_path / "class" / "flood" / "tasks_lab", attack)
    good = _good(tmp_path / "class" / "good" / "tasks_lab")
    started = time.monotonic()
    reports = _grade(tmp_path, [flood, good])
    assert time.monotonic() - started < 90
    assert _full(reports["good"]) and reports["flood"]["score"] == 0
    assert PASS not in {t["status"] for t in reports["flood"]["tests"]}
    assert any("over-long answer" in (t["message"] or "") for t in reports["flood"]["tests"]), reports["flood"]["tests"]


def test_the_verdict_channel_keeps_one_record_at_most():
    """A line that never ends on the verdict channel costs no more than one record: the reader stops
    keeping anything and says so (the runner then stops the box: "output limit")."""
    from checks.verdicts import Reader
    reader = Reader(b"k" * 32, "run", record_limit=1024, total_limit=1 << 20)
    for _ in range(10):
        assert reader.feed(b"x" * 512) == []
    assert reader.overflowed and reader._buffer == b""
    assert reader.feed(b"\n{}\n") == []


# --- 4: TERM stops the grader at any moment, leaving nothing behind ---------------------------------------

@pytest.mark.skipif(not BOXED, reason=NO_BOX)
def test_term_stops_the_grader_and_every_box_promptly(tmp_path):
    mark = marker()
    attack = f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # {mark}"])
        while True:
            time.sleep(0.05)
    """
    folders = [_with_attack(tmp_path / "class" / f"spin{n}" / "tasks_lab", attack) for n in range(3)]
    proc = subprocess.Popen([sys.executable, "-m", "checks", "grade", "--lab", *map(str, folders), "--lessons", "01",
                             "--out", str(tmp_path / "grades"), "-j", "2"], cwd=KIT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not alive_with(mark) and time.monotonic() < deadline:  # a box is running learner code
        time.sleep(0.1)
    assert alive_with(mark), "no box ever started"
    proc.send_signal(signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the grader ignored TERM") from None
    assert proc.returncode != 0
    deadline = time.monotonic() + 5
    while alive_with(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive_with(mark) == [], output.decode(errors="replace")[-2000:]


# --- 6: names and the CSV are safe for their readers --------------------------------------------------

def test_a_name_keeps_its_letters_in_any_script_and_loses_what_is_unsafe():
    """A class in China: its report was ___-600f5e for 张 三 (only ASCII letters were kept)."""
    raws = ["/c/张三/tasks_lab", "/c/张 三/tasks_lab", "/c/e\u0301cole/tasks_lab", "/c/\u202eevil/tasks_lab"]
    names = grade.student_names(raws)
    assert names[0] == "张三" and names[1].startswith("张_三-") and names[2] == "\u00e9cole"
    assert names[3].startswith("_evil-")  # a right-to-left override is not a letter
    assert grade.padded("张三", 6) == "张三  " and grade.padded("bob", 6) == "bob   "  # the score table's columns


def test_names_stay_unique_after_cleaning_and_csv_cells_are_never_formulas(tmp_path):
    raws = [str(tmp_path / n) for n in ("bob?", "bob!", "bob_-2", "-cmd", "=1+1", "x/alice", "y/alice")]
    names = grade.student_names(raws)
    assert len(set(names)) == len(names)
    assert names == grade.student_names(raws)  # the same every time
    assert not any(n.startswith(("-", ".", "=")) for n in names)
    from checks import gradebook
    reports = {"-cmd": {"score": 1, "max_score": 2, "lessons": []}, "=HYPERLINK(1)": {"score": 0, "max_score": 2},
               "@x": {}, "\tx": {}, "ok": {}}
    gradebook.write_csv(tmp_path / "grades.csv", reports, [LESSON])
    with open(tmp_path / "grades.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert {r[0] for r in rows[1:]} == {"'-cmd", "'=HYPERLINK(1)", "'@x", "'\tx", "ok"}


# --- 5: work copies cleaned; what a killed grader left is swept ---------------------------------------

def test_work_copies_are_removed_kept_with_keep_and_swept_after_a_killed_grader(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = STATE_DIR / "work" / "grade" / f"{grade.TEMP_PREFIX}{int(dead.stdout)}-ghost" / "01"
    left.mkdir(parents=True)
    good = _good(tmp_path / "class" / "keeper" / "tasks_lab")
    reports = _grade(tmp_path, [good], "--keep")
    assert _full(reports["keeper"])
    assert not left.parent.exists()  # swept at the grade's start
    kept = STATE_DIR / "work" / "grade" / "keeper" / "01"
    assert (kept / "api_states.py").is_file()
    shutil.rmtree(kept.parent)
    shutil.rmtree(STATE_DIR / "logs" / "grade" / "keeper", ignore_errors=True)


def test_a_unix_socket_in_the_folder_is_refused(tmp_path):
    folder = _good(tmp_path / "class" / "sock" / "tasks_lab")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "notes.sock"))
    try:
        reports = _grade(tmp_path, [folder])
    finally:
        server.close()
    assert reports["sock"]["score"] == 0 and "notes.sock" in reports["sock"]["message"]


def test_two_sweeps_at_once_never_fail(tmp_path):
    """Two grading workers on one machine sweep the same dead grader's folder at the same moment: the one
    that finds an entry already gone goes on (seen once in the short drill: a task failed on it)."""
    from concurrent.futures import ThreadPoolExecutor
    from checks import boxfiles
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for round_ in range(5):
        place = tmp_path / f"r{round_}"
        folder = place / f"{grade.TEMP_PREFIX}{int(dead.stdout)}-ghost"
        for n in range(300):
            (folder / f"d{n % 7}").mkdir(parents=True, exist_ok=True)
            (folder / f"d{n % 7}" / f"f{n}.py").write_text("x")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: grade.sweep_leftovers([place]), range(4)))
        assert not folder.exists()
    boxfiles.remove(tmp_path / "never-there")  # nothing there: nothing to do
