"""Distributed grading (checks/distributed.py, grade_remote.py, grading_worker.py, packing.py): packing, the
write-once store, names, and the drill."""

import base64
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from checks import grade, report
from checks import grading_worker as W
from checks.grade_remote import pack_class, submit_and_collect
from checks.packing import PackRefused, pack_folder, results_to_wire, unpack, wire_to_results
from checks.results import ERROR, PASS, errored
from shared import manifest

KIT_ROOT = Path(__file__).resolve().parent.parent
REDIS = Path("/usr/bin/redis-server")


def names_in(packed: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        return {m.name for m in tar.getmembers()}


def write(path: Path, data: bytes = b"x = 1\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_packing_skips_environments_caches_and_history_and_is_the_same_for_the_same_content(tmp_path):
    lab = tmp_path / "alice" / "tasks_lab"
    write(lab / "api_states.py")
    write(lab / "pkg" / "mod.py")
    for junk in (".venv/lib/x.py", "venv/bin/python", "__pycache__/a.pyc", ".git/HEAD", ".state/work/x",
                 "node_modules/m.js", "pkg/__pycache__/mod.pyc"):
        write(lab / junk, b"junk")
    first = pack_folder(lab)
    assert names_in(first) == {"api_states.py", "pkg", "pkg/mod.py"}
    os.utime(lab / "api_states.py", (1, 1))  # a new mtime, the same bytes: the same key
    assert pack_folder(lab) == first
    write(lab / "api_states.py", b"x = 2\n")
    assert pack_folder(lab) != first


def test_an_oversized_folder_is_refused_with_a_message_in_both_languages(tmp_path, monkeypatch):
    lab = tmp_path / "big"
    write(lab / "data.bin", os.urandom(64 * 1024))  # does not compress
    monkeypatch.setenv("LAB_LANG", "en")
    with pytest.raises(PackRefused, match="limit"):
        pack_folder(lab, limit=16 * 1024)
    monkeypatch.setenv("LAB_LANG", "zh")
    with pytest.raises(PackRefused, match="上限"):
        pack_folder(lab, limit=16 * 1024)
    zeros = tmp_path / "zeros"  # packs small, unpacks big: refused too
    write(zeros / "zeros.bin", bytes(400 * 1024))
    with pytest.raises(PackRefused):
        pack_folder(zeros, limit=16 * 1024)


def test_unpacking_refuses_a_link_out_of_the_folder(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(PackRefused, match="escape"):
        unpack(buf.getvalue(), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_refused_or_missing_folder_is_that_students_error_and_the_class_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    lessons = [manifest.lesson("01", manifest.load())]
    write(tmp_path / "class" / "alice" / "tasks_lab" / "api_states.py")
    write(tmp_path / "class" / "bob" / "tasks_lab" / "data.bin", os.urandom(64 * 1024))
    raws = [str(tmp_path / "class" / n / "tasks_lab") for n in ("alice", "bob", "carol")]
    students = [grade.Student(raw, name) for raw, name in zip(raws, grade.student_names(raws), strict=True)]
    jobs, packed = pack_class(students, lessons, 16 * 1024, "abc123")
    assert [p.student.name for group in jobs.values() for p in group] == ["alice"]
    [key] = jobs
    assert key.endswith(":01:abc123") and key in packed
    alice, bob, carol = students
    assert alice.error is None
    assert "limit" in bob.error and "no such folder" in carol.error
    for s in (bob, carol):  # every check of the lesson, as errors: the report keeps its real maximum
        assert {c.status for r in s.results for c in r.checks} == {ERROR}
        assert report.marks([c for r in s.results for c in r.checks])["max_score"] > 0


def test_student_names_stay_unique_for_clashing_and_repeated_folders():
    raws = ["x/class/alice/tasks_lab", "y/class/alice/tasks_lab", "x/class/alice/tasks_lab", "z/bob/tasks_lab"]
    names = grade.student_names(raws)
    assert len(set(names)) == len(names)
    assert names[3] == "bob"


def test_results_travel_and_come_back_as_the_local_report(tmp_path):
    data = manifest.load()
    lessons = [manifest.lesson("01", data)]
    worker_lab = "/tmp/tasklab-grade-xyz/tasks_lab"
    results = errored(lessons, f"{worker_lab}/api_states.py: line 3")
    results[0].checks[1].status, results[0].checks[1].notes = PASS, [f"ran {worker_lab}/verify_states.py"]
    wire = json.loads(json.dumps(results_to_wire(results, None, worker_lab)))
    mine = "/home/t/class/alice/tasks_lab"
    back, error = wire_to_results(wire, data, mine)
    expected = json.loads(json.dumps(report.to_dict(results, mine)).replace(worker_lab, mine))
    got = report.to_dict(back, mine, error)
    for d in (expected, got):
        d.pop("created_at")
    assert got == expected


@pytest.fixture
def broker(tmp_path):
    if not REDIS.exists():
        pytest.skip("no redis-server")
    from checks.drill_machines import Broker
    b = Broker(tmp_path)
    b.start()
    W.configure(b.url)
    try:
        yield b
    finally:
        b.stop()


def test_the_store_is_write_once_so_a_second_writer_keeps_the_first(broker):
    assert W.store_result("k1", {"n": 1}) is True
    assert W.store_result("k1", {"n": 2}) is False
    assert W.stored_result("k1") == {"n": 1}


def test_a_redelivery_after_the_result_was_stored_grades_nothing_and_is_counted(broker, tmp_path):
    key = "feed:01:" + W.kit_version()[:12]
    W.store_result(key, {"n": 1})
    write(tmp_path / "lab" / "api_states.py")
    packed = base64.b64encode(pack_folder(tmp_path / "lab")).decode()
    outcome = W.grade_folder.apply(args=(key, "alice", packed, ["01"])).get()
    assert outcome == {"key": key, "graded": False}
    runs = W.deliveries_of(key)
    assert len(runs) == 1 and runs[0]["pid"] == os.getpid()
    assert W.stored_result(key) == {"n": 1}


def test_short_drill_loses_nothing_and_matches_the_local_verdicts(tmp_path):
    """Three workers, a killed pool child, a restarted broker, a warm shutdown: python -m checks.grade_drill --short."""
    if not REDIS.exists():
        pytest.skip("no redis-server")
    out = tmp_path / "ledger.json"
    proc = subprocess.Popen([sys.executable, "-m", "checks.grade_drill", "--short", "--out", str(out)], cwd=KIT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, LAB_LANG="en"))
    try:
        output, _ = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the drill stops its broker and workers in its finally blocks
        output, _ = proc.communicate(timeout=90)
        pytest.fail("the short drill overran 420 s:\n" + output[-3000:])
    assert proc.returncode == 0, output[-3000:]
    ledger = json.loads(out.read_text())
    L = ledger["ledger"]
    assert L["lost"] == 0 and L["mismatches"] == [] and L["distinct_keys"] == ledger["folders"] == 6
    assert all(r["stored"] and r["verdicts_match"] for r in L["rows"])
    assert any(r["failed_checks"] for r in L["rows"]) and any(not r["failed_checks"] for r in L["rows"])
    # The killed pool child's folder comes back (task_reject_on_worker_lost), unless the drill says why not.
    assert L["duplicates"] >= 1 or ledger.get("no_redelivery_reason"), output[-3000:]
    assert {e["what"] for e in ledger["events"]} >= {"three workers ready"}


def _git_folder(path: Path) -> Path:
    """A learner's folder that is a git repository with one tag per lesson it reached (lesson-01 only)."""
    write(path / "api_states.py", b"# lesson 01, not done yet\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "lesson 01"], ["tag", "lesson-01"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    write(path / "api_states.py", b"# edited after the tag: must not be graded\nraise SystemExit(3)\n")
    return path


def test_at_with_lesson_numbers_sends_one_part_per_lesson_and_a_missing_tag_is_that_lessons_error(tmp_path):
    data = manifest.load()
    lessons = [manifest.lesson("01", data), manifest.lesson("02", data)]
    folder = _git_folder(tmp_path / "class" / "alice" / "tasks_lab")
    [alice] = [grade.Student(str(folder), "alice")]
    jobs, packed = pack_class([alice], lessons, 1024 * 1024, "abc123", at="lesson-{NN}")
    [key] = jobs
    assert key.endswith(":01:abc123") and [p.lessons for p in alice.parts] == [["01"], ["02"]]
    with tarfile.open(fileobj=io.BytesIO(packed[key])) as tar:  # the tagged commit's file, not today's
        text = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("api_states.py"))).read()
    assert b"not done yet" in text
    missing = alice.parts[1].results
    assert {c.status for r in missing for c in r.checks} == {ERROR} and "lesson-02" in missing[0].checks[0].message


def test_at_through_a_real_worker_writes_the_same_report_files(broker, tmp_path):
    folder = _git_folder(tmp_path / "class" / "alice" / "tasks_lab")
    worker = subprocess.Popen([sys.executable, "-m", "checks.distributed", "worker", "-c", "1", "-n", "t1@%h"],
                              cwd=KIT_ROOT, env=dict(os.environ, LAB_GRADE_BROKER=broker.url,
                                                     LAB_HOME=str(tmp_path / "home")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        [alice] = submit_and_collect([folder], ["01", "02"], tmp_path / "out", broker.url, timeout=300,
                                     at="lesson-{NN}", stream=io.StringIO())
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)
    body = json.loads((tmp_path / "out" / "alice.json").read_text())
    by_lesson = {}
    for test in body["tests"]:
        by_lesson.setdefault(test["lesson"], set()).add(test["status"])
    assert by_lesson["01"] <= {"fail", "skipped"} and "fail" in by_lesson["01"], body["tests"]
    assert by_lesson["02"] == {"error"}
    assert [lesson["id"] for lesson in body["lessons"]] == ["01", "02"]


def test_a_folder_whose_grading_dies_every_time_is_stopped_with_an_error(broker, tmp_path, monkeypatch):
    """MAX_EXECUTIONS starts without a result (each time the grading process died): the next start stores
    an error for the folder instead of grading it again, so one poison folder cannot loop forever."""
    monkeypatch.setenv("LAB_LANG", "en")
    key = "poison:01:" + W.kit_version()[:12]
    for n in range(W.MAX_EXECUTIONS):
        W.record_delivery(key, {"host": f"g{n}", "pid": 1, "task": "t", "at": 0, "redelivered": n > 0})
    write(tmp_path / "lab" / "api_states.py")
    packed = base64.b64encode(pack_folder(tmp_path / "lab")).decode()
    outcome = W.grade_folder.apply(args=(key, "mallory", packed, ["01"])).get()
    assert outcome["graded"] and outcome["stored"]
    stored = W.stored_result(key)
    assert stored["result"]["lessons"] == [] and f"started {W.MAX_EXECUTIONS} times" in stored["result"]["error"]


def test_folders_of_a_killed_grading_process_are_swept(tmp_path, monkeypatch):
    """A SIGKILLed pool child leaves its temporary copy, work and log folders: the next task removes the
    ones named after processes that are gone, never a live one's."""
    lab = tmp_path / "lab"
    monkeypatch.setattr(W, "STATE_DIR", lab)
    monkeypatch.setattr(W.tempfile, "tempdir", str(tmp_path / "tmp"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    made = []
    for place in (tmp_path / "tmp", lab / "work" / "grade", lab / "logs" / "grade"):
        for pid in (dead_pid, os.getpid()):
            folder = place / f"{W.TEMP_PREFIX}{pid}-alice-1234"
            folder.mkdir(parents=True)
            made.append(folder)
    removed = W.sweep_leftovers()
    assert sorted(removed) == sorted(f for f in made if f"-{dead_pid}-" in f.name)
    assert all(f.exists() for f in made if f"-{os.getpid()}-" in f.name)
