"""The reference lessons pass every check, through the real command line, with reports."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checks.workdir import reference_files
from shared import manifest
from tests.mutants import all_mutants

KIT = manifest.KIT_ROOT
DATA = manifest.load()
READY = [lesson for lesson in DATA["lessons"] if lesson["status"] == "ready"]


def _cli(*args, home: Path, cwd=KIT):
    # Each run gets its own LAB_HOME (in the test's tmp_path, so nothing stays behind), so parallel test
    # workers never share a work folder.
    env = dict(os.environ, LAB_LANG="en", LAB_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "checks", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _expect_all_passed(report_path: Path, lessons: list[dict]) -> dict:
    data = json.loads(report_path.read_text())
    # one record per check item, in order; then the lesson's regressions (earlier checks re-run on its files)
    expected = [(cid, regression) for lesson in lessons
                for cid, regression in [(c["id"], False) for c in lesson["checks"]]
                + [(r, True) for r in sorted(lesson.get("regressions", []))]]
    assert [(t["id"], t["regression"]) for t in data["tests"]] == expected
    not_passed = [(t["id"], t["status"], t["message"]) for t in data["tests"] if t["status"] != "pass"]
    assert not not_passed  # exercises included: the reference does them
    assert data["status"] == "pass" and data["score"] == data["max_score"] and data["bonus"] == data["max_bonus"]
    return data


def _figure_rules() -> dict:
    """Check id -> a rule on its figures, from every tests/figrules_*.py (one per group of lessons)."""
    import importlib
    rules = {}
    for path in sorted(Path(__file__).parent.glob("figrules_*.py")):
        rules.update(importlib.import_module(f"tests.{path.stem}").RULES)
    return rules


def _figures_show_what_was_proved(data: dict) -> None:
    """The timelines the HTML report draws: each check with a rule carries figures that show what it proved
    (e.g. lesson 02's never more than two permits held at once)."""
    rules = _figure_rules()
    for test in data["tests"]:
        rule = rules.get(test["id"])
        if rule is None or test["regression"] or test["status"] != "pass":
            continue
        assert test.get("figures"), f"{test['id']} drew no figure"
        rule(test["figures"])


@pytest.mark.parametrize("lesson", READY, ids=lambda lesson: lesson["id"])
def test_reference_lesson_passes_every_check(lesson, tmp_path):
    run = _cli("run", lesson["id"], "--report", str(tmp_path / "r.json"), home=tmp_path / "home")
    assert run.returncode == 0, run.stdout + run.stderr
    data = _expect_all_passed(tmp_path / "r.json", [lesson])
    _figures_show_what_was_proved(data)
    if lesson.get("services"):  # credentials never reach the output, the report or any log
        from shared.credentials import URL_KEYS, ensure_credentials
        secret = ensure_credentials()
        texts = [run.stdout, run.stderr, (tmp_path / "r.json").read_text()]
        texts += [p.read_text(errors="replace") for p in (tmp_path / "home" / "logs").rglob("*.log")]
        for key in ("TASK_BROKER_PASSWORD", "MYSQL_PASSWORD", *URL_KEYS):
            assert all(secret[key] not in text for text in texts), f"{key} leaked"


def test_first_three_lessons_in_one_run_with_both_reports(tmp_path):
    lessons = READY[:3]
    run = _cli("run", *[lesson["id"] for lesson in lessons], "--report", str(tmp_path / "r.json"),
               "--junit", str(tmp_path / "r.xml"), home=tmp_path / "home")
    assert run.returncode == 0, run.stdout + run.stderr
    _expect_all_passed(tmp_path / "r.json", lessons)
    junit = ET.parse(tmp_path / "r.xml").getroot()
    total = sum(len(lesson["checks"]) for lesson in lessons)
    assert junit.get("tests") == str(total) and junit.get("failures") == "0" and junit.get("errors") == "0"


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest.update(f"{path.relative_to(folder)}|{stat.st_mode}|{stat.st_mtime_ns}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _lab_copy(tmp_path: Path, upto: str) -> Path:
    lab = tmp_path / "alice" / "tasks_lab"
    for rel, src in reference_files(DATA["lessons"], upto).items():
        (lab / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, lab / rel)
    return lab


def test_lab_folder_passes_and_is_left_byte_for_byte_unchanged(tmp_path):
    lab = _lab_copy(tmp_path, "01")
    before = _tree_digest(lab)
    run = _cli("run", "01", "--lab", str(lab), home=tmp_path / "home")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _tree_digest(lab) == before


def test_lab_folder_with_one_mistake_fails_and_names_the_check(tmp_path):
    mutant = next(m for m in all_mutants() if m.lesson == "01")
    lab = _lab_copy(tmp_path, "01")
    mutant.apply(lab)
    run = _cli("run", "01", "--lab", str(lab), "--report", str(tmp_path / "r.json"), home=tmp_path / "home")
    assert run.returncode == 1
    failed = [t["id"] for t in json.loads((tmp_path / "r.json").read_text())["tests"] if t["status"] != "pass"]
    assert failed == list(mutant.fails)
    assert mutant.fails[0] in run.stdout


def test_grade_writes_one_report_per_learner(tmp_path):
    good = _lab_copy(tmp_path / "a", "01")
    missing = tmp_path / "bob" / "tasks_lab"
    run = _cli("grade", "--lab", str(good), str(missing), "--lessons", "01", "--out", str(tmp_path / "out"),
               home=tmp_path / "home")
    assert run.returncode == 1, run.stdout + run.stderr  # one folder could not be graded
    assert json.loads((tmp_path / "out" / "alice.json").read_text())["status"] == "pass"
    assert json.loads((tmp_path / "out" / "bob.json").read_text())["status"] == "error"


def test_diff_shows_what_a_lesson_adds(tmp_path):
    run = _cli("diff", "03", home=tmp_path / "home")
    assert run.returncode == 0
    assert "+++ b/api_background.py" in run.stdout and "--- /dev/null" in run.stdout


def test_pythonoptimize_cannot_turn_an_empty_lesson_01_into_a_pass(tmp_path):
    # A new user's shell may carry PYTHONOPTIMIZE=1: with it the verifiers' asserts would vanish and an
    # api_states.py that does nothing (an app with no routes) would pass 01.4.  The runner clears it (and
    # the verifier refuses -O): every core check must still fail.
    lab = tmp_path / "tasks_lab"
    lab.mkdir()
    (lab / "api_states.py").write_text("from fastapi import FastAPI\napp = FastAPI()\njobs = {}\n")  # does nothing
    env_home = tmp_path / "home"
    run = subprocess.run([sys.executable, "-m", "checks", "run", "01", "--lab", str(lab), "--report",
                          str(tmp_path / "r.json")], cwd=KIT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(env_home), PYTHONOPTIMIZE="1"))
    assert run.returncode == 1, run.stdout + run.stderr
    statuses = {t["id"]: t["status"] for t in json.loads((tmp_path / "r.json").read_text())["tests"]}
    assert all(statuses[c] != "pass" for c in ("01.1", "01.2", "01.3", "01.4")), statuses


def test_a_missing_schema_file_is_that_folders_error_never_a_stop(tmp_path):
    # Grading a class must go on past one learner's missing schema_jobs.sql: its checks are errors that
    # say which file, and the run is a failed lesson (exit 1), not a usage error (exit 2).
    lab = tmp_path / "tasks_lab"
    for rel, src in reference_files(DATA["lessons"], "11").items():
        (lab / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, lab / rel)
    (lab / "schema_jobs.sql").unlink()
    run = _cli("run", "11", "--lab", str(lab), "--report", str(tmp_path / "r.json"), home=tmp_path / "home")
    assert run.returncode == 1, run.stdout + run.stderr
    tests = [t for t in json.loads((tmp_path / "r.json").read_text())["tests"] if not t["regression"]]
    assert {t["status"] for t in tests} == {"error"} and all("schema_jobs.sql" in t["message"] for t in tests)
