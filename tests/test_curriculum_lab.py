"""Opt-in: a folder typed from the curriculum as written passes `--lab`.

The curriculum is not part of the kit. A maintainer who has it points
LAB_TEST_CURRICULUM at its JSON (a list of lessons whose steps carry `filename`
and `code`); this test then assembles a learner's folder from those steps —
steps of one lesson that name the same file are appended, a later lesson's
file replaces the earlier one — and checks it with `--lab`. Without the
variable the test is skipped.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared import manifest
from tests import switches

CURRICULUM = switches.curriculum()
DATA = manifest.load()
READY = [lesson["id"] for lesson in DATA["lessons"] if lesson["status"] == "ready"]

pytestmark = pytest.mark.skipif(not CURRICULUM, reason="set LAB_TEST_CURRICULUM=/path/to/curriculum.json")


# Edits the curriculum asks for in prose only ("add the module to celery_app.py's include list"), and the
# one line lesson 11's guide tells native-mode (MariaDB) learners to change: MariaDB names the statement
# time limit max_statement_time, in seconds.
# (old None: append `new` to the file, as "put this block into celery_app.py" asks.)
PROSE_EDITS = {
    "10": [("celery_app.py", 'include=["export_tasks"]', 'include=["export_tasks", "retry_tasks"]')],
    "11": [("state_store.py", "SET SESSION max_execution_time = 3000", "SET SESSION max_statement_time = 3")],
    # "add queue_name to the publisher's claim SELECT and send to event['queue_name']"
    "13": [("publisher.py", "SELECT id,job_id FROM export_outbox", "SELECT id,job_id,queue_name FROM export_outbox"),
           ("publisher.py", 'queue="exports"', 'queue=event["queue_name"]')],
    # "add the module to the include list; put the app.conf part into celery_app.py"
    "14": [("celery_app.py", 'include=["export_tasks", "retry_tasks"]',
            'include=["export_tasks", "retry_tasks", "schedule_tasks"]'),
           ("celery_app.py", None, 'app.conf.timezone = "UTC"\napp.conf.beat_schedule = {\n'
            '    "export-each-minute": {\n        "task": "products.schedule_tick", "schedule": 60.0,\n'
            '        "options": {"queue": "exports.fast"},\n    }\n}\n')],
    # "call can_continue before producing the file; stop when it says False"
    "15": [("export_tasks.py", "from state_store import claim, finish",
            "from state_store import claim, finish, can_continue"),
           ("export_tasks.py", 'token = str(job["lease_token"])\n',
            'token = str(job["lease_token"])\n    if not can_continue(job_id, token):\n'
            '        return {"job_id": job_id, "published": False}\n')],
    # "log after the claim and after finish; bind=True to read self.request.id"
    "16": [("export_tasks.py", "from celery_app import app\n",
            "from celery_app import app\nfrom task_logging import log_phase\n"),
           ("export_tasks.py", '@app.task(name="products.export")\ndef export_products(job_id: str):',
            '@app.task(bind=True, name="products.export")\ndef export_products(self, job_id: str):'),
           ("export_tasks.py", 'token = str(job["lease_token"])\n',
            'token = str(job["lease_token"])\n'
            '    log_phase(job_id, "claimed", self.request.id, token, job["attempts"])\n'),
           ("export_tasks.py", "published = finish(job_id, token, str(target))\n",
            "published = finish(job_id, token, str(target))\n"
            '    log_phase(job_id, "published", self.request.id, token, job["attempts"], success=published)\n')],
}


# Where the curriculum as written is wrong on a server the kit supports, the check must keep failing it.
KNOWN_GAPS = {
    # The curriculum's outbox index (sent_at, available_at, created_at) does not serve the claim's ORDER BY:
    # on MariaDB the first claimer locks every pending row and a second gets nothing (issue 5's measurement).
    # Lesson 12's guide teaches the index that fixes it.
    "12.4": "curriculum outbox index does not serve the claim's ORDER BY",
    # Likewise the recovery scan: ORDER BY j.updated_at, j.id has no index to walk, so the first scanner
    # locks every candidate and a second recovers nothing. Lesson 15's guide teaches the index and ORDER BY.
    "15.4": "curriculum recovery scan has no index serving its ORDER BY",
    # The curriculum's claim of one known id uses FOR UPDATE SKIP LOCKED: while the publisher's confirm
    # holds the job row for its foreign-key check, claim returns None and the job is stranded. 13.7 forces
    # that moment; lesson 13's guide teaches the plain FOR UPDATE.
    "13.7": "curriculum claim skips the row the publisher's confirm briefly locks",
    # Not a fault of the course's code: its verification-record.json is a template to fill in after the
    # drills, and 16.1 judges a record only by evidence, so the untouched template fails.
    "16.1": "the course's record template is unfilled until the learner runs the drills",
}


def replace_definitions(before: str, code: str) -> str:
    """Swap each top-level def/class of `code` into `before` where one of that name stands; append the rest."""
    lines = before.splitlines()
    for node in ast.parse(code).body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        new = "\n".join(code.splitlines()[start - 1:node.end_lineno])
        old = next((n for n in ast.parse("\n".join(lines)).body
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == node.name), None)
        if old is None:
            lines += ["", "", *new.splitlines()]
        else:
            first = min([old.lineno] + [d.lineno for d in old.decorator_list])
            lines[first - 1:old.end_lineno] = new.splitlines()
    return "\n".join(lines) + "\n"


def assemble(upto: str, dest: Path) -> Path:
    """A learner's folder after lesson `upto`, typed from the curriculum's steps as written."""
    lessons = json.loads(Path(CURRICULUM).read_text(encoding="utf-8"))
    for lesson in lessons:
        if lesson["id"] > upto:
            break
        written: set[str] = set()
        files = manifest.lesson(lesson["id"], DATA)["files"]
        for step in lesson["steps"]:
            name, code = step.get("filename"), step.get("code")
            if not name or not code or (name.endswith(".json") and name not in files):  # an example output
                continue
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            # Appended: a later step of the same lesson, or a step that says so (追加, "append").
            body = step.get("body", "")
            append = path.exists() and (name in written or "追加" in body)
            # "replace the same-named function(s)" / "replace submit_snapshot", but not "replace the whole file"
            replace = "同名函数" in code.split("\n", 1)[0] or (
                "替换" in body and not any(whole in body for whole in ("整体替换", "完整代码替换")))
            if path.exists() and replace:
                path.write_text(replace_definitions(path.read_text(encoding="utf-8"), code), encoding="utf-8")
            elif append:
                before = path.read_text(encoding="utf-8")
                lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
                if lines and all(line.startswith("assert ") for line in lines) and "if __name__" in before:
                    # "put these acceptance asserts after the joins": they belong at the end of the main block
                    code = "\n".join("    " + line for line in lines)
                path.write_text(before + "\n" + code + "\n", encoding="utf-8")
            else:
                path.write_text(code + "\n", encoding="utf-8")
            written.add(name)
        for name, old, new in PROSE_EDITS.get(lesson["id"], []):
            path = dest / name
            text = path.read_text(encoding="utf-8")
            assert old is None or old in text, f"lesson {lesson['id']}: {name} has no {old!r} to change"
            path.write_text(text + "\n" + new if old is None else text.replace(old, new), encoding="utf-8")
    return dest


@pytest.mark.parametrize("lesson_id", READY)
def test_curriculum_folder_passes_lab(lesson_id, tmp_path):
    lab = assemble(lesson_id, tmp_path / "tasks_lab")
    report = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "checks", "run", lesson_id, "--lab", str(lab), "--report", str(report)],
                         cwd=manifest.KIT_ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, LAB_LANG="en"))
    tests = json.loads(report.read_text())["tests"]
    bad = [(t["id"], t["status"], t["message"]) for t in tests
           if t["status"] not in ("pass", "skipped") and t["id"] not in KNOWN_GAPS]
    assert not bad, run.stdout
    gaps = sorted(t["id"] for t in tests if t["status"] != "pass" and t["id"] in KNOWN_GAPS)
    assert gaps == sorted(g for g in KNOWN_GAPS if g.split(".")[0] == lesson_id), run.stdout  # still a gap, and caught
    assert run.returncode == (1 if gaps else 0), run.stdout
    if not gaps and lesson_id <= "03":
        # Every mark it earned: all core marks (the course gives no exercise code, so the exercises are
        # "not attempted" — skipped, never failed), the same score in the terminal total and in the JSON.
        body = json.loads(report.read_text())
        core = sum(t["points"] for t in tests if t["kind"] == "core")
        assert body["score"] == core > 0, (body["score"], core)
        assert f"score {body['score']}/{body['max_score']}" in run.stdout, run.stdout[-800:]
        assert all(t["status"] in ("pass", "skipped") for t in tests if t["kind"] == "exercise")
    skipped = [t["id"] for t in tests if t["status"] == "skipped"]
    # only work not taken up skips
    assert all(t["kind"] in ("exercise", "extension") for t in tests if t["id"] in skipped)


def test_the_finished_course_folder_graded_at_once(tmp_path):
    """The end of the course: one folder typed through lesson 16, graded with `--lessons all` in one grade.
    Every counted mark is earned but the known gaps; what a later lesson replaced is shown superseded."""
    lab = assemble(READY[-1], tmp_path / "class" / "learner" / "tasks_lab")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "checks", "grade", "--lab", str(lab), "--lessons", "all",
                          "--out", str(out), "-j", "1"], cwd=manifest.KIT_ROOT, capture_output=True, text=True,
                         timeout=3600, env=dict(os.environ, LAB_LANG="en"))
    [report] = list(out.glob("*.json"))
    body = json.loads(report.read_text())
    tests = body["tests"]
    bad = [(t["id"], t["status"], t["message"]) for t in tests
           if t["status"] not in ("pass", "skipped", "superseded") and t["id"] not in KNOWN_GAPS]
    assert not bad, run.stderr[-2000:]
    missed = sorted({t["id"] for t in tests if t["status"] not in ("pass", "skipped", "superseded")})
    assert missed == sorted(KNOWN_GAPS), missed  # every gap still caught, nothing else lost
    # Marks: all but the gaps' and those of exercises the course gives no code for (not attempted: skipped).
    counted = [t for t in tests if not t["regression"] and not t["bonus"]]
    gap_points = sum(t["points"] for t in counted if t["id"] in KNOWN_GAPS)
    not_attempted = [t for t in counted if t["status"] == "skipped"]
    assert all(t["kind"] == "exercise" for t in not_attempted), [t["id"] for t in not_attempted]
    assert body["max_score"] - body["score"] == gap_points + sum(t["points"] for t in not_attempted), (
        body["score"], body["max_score"], gap_points, [t["id"] for t in not_attempted])
    replaced = {t["id"] for t in tests if t["status"] == "superseded"}
    declared = {c["id"] for lesson in DATA["lessons"] for c in lesson["checks"] if c.get("superseded_by")}
    assert replaced and replaced <= declared, replaced - declared
