"""Lessons 01–07 as a learner meets them: one clear cause per mistake, equivalent answers, exercises not done.

  - a diagnosis: a learner-mistake mutant (tests/mutants/lessonNN.py) fails the check, and its message names
    the right file and cause (not a neighbour's: a POST answering 200 is 01.1's cause, never transition's);
  - an equivalent answer: a valid way of writing the lesson other than the reference's passes the check;
  - not done: the reference with an exercise taken back out shows that exercise as SKIP, never as passed.

With LAB_TEST_CURRICULUM set (see test_curriculum_lab.py), a folder typed from the course for lessons 01–03,
with each exercise done as the course's answer says, gets the full course marks in JSON and the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest
from tests import switches
from tests.mutants import all_mutants

DATA = manifest.load()
MUTANTS = {m.name: m for m in all_mutants()}


def _run_one(tmp_path: Path, lesson_id: str, check_id: str, edit) -> object:
    lesson = manifest.lesson(lesson_id, DATA)
    work = materialise(DATA["lessons"], lesson, tmp_path / "work")
    edit(work)
    result = run_lesson(lesson, work, tmp_path / "logs", only={check_id})
    return next(c for c in result.checks if c.id == check_id)


def _edits(changes: dict[str, list[tuple[str | None, str]]]):
    """{file: [(old, new), ...]}: each old occurs in the file (all its places change); old None writes the file."""
    def apply(work: Path) -> None:
        for name, pairs in changes.items():
            path = work / name
            for old, new in pairs:
                if old is None:
                    path.write_text(new, encoding="utf-8")
                    continue
                text = path.read_text(encoding="utf-8")
                assert old in text, f"{name} has no {old!r}"
                path.write_text(text.replace(old, new), encoding="utf-8")
    return apply


# ---------------------------------------------------------------- diagnoses: mutant -> (check, needles)

DIAGNOSES = [
    ("submit-answers-200", "01.3", ["verify_states.py stopped at line", "status_code == 202", "answers 200, not 202",
                                    "01.1's cause", "not transition", "fix 01.1 first"]),
    ("location-points-to-collection", "01.3", ["verify_states.py stopped at line", "location", "01.1's cause",
                                               "not transition", "fix 01.1 first"]),
    ("new-job-starts-running", "01.3", ["verify_states.py stopped at line", "'running', not queued", "fix 01.2 first"]),
    ("blocking-sleep-in-read", "02.2", ["blocking call in async code", "never gave the event loop back",
                                        "bounded_async.py:", "read_product(): time.sleep(0.1)"]),
    ("demo-prints-the-lines", "02.6", ["no budget really expired", "printing the lines is not enough"]),
    ("03-start-forgets-add", "03.2", ["task_registry.py", "start() did not put the task into running",
                                      "Fix start() in task_registry.py first"]),
    ("03-start-forgets-add", "03.3", ["task_registry.py", "start() did not put the task into running"]),
    ("03-blocking-sleep-in-export", "03.1", ["blocking call in async code", "time.sleep(1) at api_background.py:",
                                             "in local_export()", "answered no request"]),
    ("03-add-task-given-a-call", "03.1", ["api_background.py", "add_task was given a call's result",
                                          "TypeError: the first argument must be callable",
                                          "Pass the function and its arguments, not a call's result"]),
    ("03-exercise-bypasses-registry", "03.5", ["not started with task_registry.start", "never retrieved"]),
    ("04-exercise-capacity-only", "04.4", ["waits only 0.05s per id", "0.2 s"]),
]


@pytest.mark.parametrize("name, check_id, needles", DIAGNOSES, ids=[f"{c}-{n}" for n, c, _ in DIAGNOSES])
def test_a_mistake_is_named_by_its_cause(name, check_id, needles, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    mutant = MUTANTS[name]
    check = _run_one(tmp_path, mutant.lesson, check_id, mutant.apply)
    assert check.status == "fail", (check.status, check.message)
    missing = [needle for needle in needles if needle not in check.message]
    assert not missing, f"missing {missing} in: {check.message}"


# ---------------------------------------------------------------- equivalent answers pass

EQUIVALENT = {
    "01.1-full-url-location": ("01.1", {"api_states.py": [  # a full URL of the server it runs on
        ("from fastapi import FastAPI, HTTPException, Response",
         "from fastapi import FastAPI, HTTPException, Request, Response"),
        ("async def submit_export(body: ExportIn, response: Response) -> dict:",
         "async def submit_export(body: ExportIn, response: Response, request: Request) -> dict:"),
        ('response.headers["Location"] = f"/exports/{job_id}"',
         'response.headers["Location"] = str(request.url_for("get_export", job_id=job_id))')]}),
    "02.5-other-names": ("02.5", {"bounded_async.py": [("in_flight", "running"), ("peak", "max_running")]}),
    "02.5-counts-in-a-dict": ("02.5", {"bounded_async.py": [
        ("in_flight = 0\npeak = 0\n", 'stats = {"reading": 0, "most": 0}\n'),
        ("    global in_flight, peak\n    in_flight += 1\n    peak = max(peak, in_flight)\n",
         '    stats["reading"] += 1\n    stats["most"] = max(stats["most"], stats["reading"])\n'),
        ("        in_flight -= 1\n", '        stats["reading"] -= 1\n')]}),
    "03.5-work-itself-fails": ("03.5", {"registry_demo.py": [
        ("    start(failing_work())  # the exercise: its error is logged, not lost\n", ""),
        ("        await asyncio.sleep(30)  # much longer than the grace window, so it will be cancelled\n",
         '        await asyncio.sleep(0.1)\n        raise ValueError("drill")\n')]}),
    "03.2-work-itself-fails": ("03.2", {"registry_demo.py": [
        ("    start(failing_work())  # the exercise: its error is logged, not lost\n", ""),
        ("        await asyncio.sleep(30)  # much longer than the grace window, so it will be cancelled\n",
         '        await asyncio.sleep(0.1)\n        raise ValueError("drill")\n')]}),
    "05.5-a-script-of-its-own": ("05.5", {
        "pool_io.py": [("        queued = pool.submit(read_sync, 2, stop)  "
                        "# exercise: waits behind the first, never started\n", ""),
                       ('            print("queued cancel:", queued.cancel())  '
                        '# True: withdrawn before it started\n', "")],
        "cancel_queued.py": [(None, "from concurrent.futures import ThreadPoolExecutor\nfrom threading import Event\n\n"
                                    "from pool_io import read_sync\n\nstop = Event()\n"
                                    "with ThreadPoolExecutor(max_workers=1) as pool:\n"
                                    "    first = pool.submit(read_sync, 1, stop)\n"
                                    "    second = pool.submit(read_sync, 2, stop)\n"
                                    '    print("queued cancel:", second.cancel())\n'
                                    '    print("running cancel:", first.cancel())\n'
                                    "    stop.set()\n    print(first.result())\n")]}),
    "06.6-both-sizes-in-one-run": ("06.6", {"process_export.py": [
        ("    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)\n",
         "    for rounds in (10, ROUNDS):\n        main(rounds)\n")]}),
    "06.3-both-sizes-in-one-run": ("06.3", {"process_export.py": [
        ("    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)\n",
         "    for rounds in (10, ROUNDS):\n        main(rounds)\n")]}),
}


@pytest.mark.parametrize("case", sorted(EQUIVALENT))
def test_an_equivalent_answer_passes(case, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    check_id, changes = EQUIVALENT[case]
    check = _run_one(tmp_path, check_id.split(".")[0], check_id, _edits(changes))
    assert check.status == "pass", (check.status, check.message, check.notes)


# ---------------------------------------------------------------- an exercise not done never passes

NOT_DONE = {
    "01.5": {"api_states.py": [('    return {**row, "terminal": row["status"] in TERMINAL}\n', "    return row\n")]},
    "02.5": {"bounded_async.py": [("    global in_flight, peak\n    in_flight += 1\n"
                                   "    peak = max(peak, in_flight)\n", ""),
                                  ("        in_flight -= 1\n", "        pass\n")]},
    "03.5": {"registry_demo.py": [("    start(failing_work())  # the exercise: its error is logged, not lost\n", "")]},
    "04.4": {"threaded_queue.py": [("Queue(maxsize=1)", "Queue(maxsize=4)"), ("time.sleep(0.2)", "time.sleep(0.05)")]},
    "05.5": {"pool_io.py": [
        ("        queued = pool.submit(read_sync, 2, stop)  # exercise: waits behind the first, never started\n", ""),
        ('            print("queued cancel:", queued.cancel())  # True: withdrawn before it started\n', "")]},
    "06.6": {"process_export.py": [("    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)\n", "    main()\n")]},
}


@pytest.mark.parametrize("check_id", sorted(NOT_DONE))
def test_an_exercise_not_done_is_skipped(check_id, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    check = _run_one(tmp_path, check_id.split(".")[0], check_id, _edits(NOT_DONE[check_id]))
    assert check.status == "skipped" and "not attempted" in check.message, (check.status, check.message)


def test_each_lesson_has_exactly_one_exercise_check():
    for lesson in DATA["lessons"][:7]:
        exercises = [c["id"] for c in lesson["checks"] if c["kind"] == "exercise"]
        assert len(exercises) == 1, (lesson["id"], exercises)


def test_the_asyncio_note_is_an_extension_and_its_skip_points_at_the_guide(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    lesson = manifest.lesson("02", DATA)
    kinds = {c["id"]: c["kind"] for c in lesson["checks"]}
    assert [cid for cid, kind in kinds.items() if kind == "exercise"] == ["02.5"]
    assert all(kinds[f"02.{n}"] == "extension" for n in range(6, 11))
    check = _run_one(tmp_path, "02", "02.9", lambda work: (work / "experiment_taskgroup.py").unlink())
    assert check.status == "skipped", (check.status, check.message)
    assert "lessons/02-asyncio-bounded/README.md" in check.message
    section = "Extension: the asyncio note's scripts"
    assert section in check.message
    guide = (manifest.KIT_ROOT / lesson["folder"] / "README.md").read_text(encoding="utf-8")
    assert f"### {section}" in guide and "### 扩展：asyncio 笔记的脚本" in guide
    assert "asyncio.TaskGroup()" in guide.split(f"### {section}")[1]  # the guide shows the code to write


# ---------------------------------------------------------------- the course typed, with its exercises

CURRICULUM = switches.curriculum()

# Each exercise of lessons 01–03 done as the course's answer says, the way a learner types it.
COURSE_EXERCISES = {
    "api_states.py": [("        raise HTTPException(404, \"导出任务不存在\")\n    return jobs[job_id]",
                       "        raise HTTPException(404, \"导出任务不存在\")\n"
                       "    row = jobs[job_id]\n"
                       "    return {**row, \"terminal\": "
                       "row[\"status\"] in {\"succeeded\", \"failed\", \"cancelled\"}}")],
    "bounded_async.py": [("async def read_product(product_id: int):\n    await asyncio.sleep(0.1)\n",
                          "running = 0\nmax_running = 0\n\n\nasync def read_product(product_id: int):\n"
                          "    global running, max_running\n    running += 1\n"
                          "    max_running = max(max_running, running)\n    try:\n        await asyncio.sleep(0.1)\n"
                          "    finally:\n        running -= 1\n")],
    "registry_demo.py": [("        await asyncio.sleep(30)\n",
                          "        await asyncio.sleep(0.1)\n        raise ValueError(\"drill\")\n")],
}


@pytest.mark.skipif(not CURRICULUM, reason="set LAB_TEST_CURRICULUM=/path/to/curriculum.json")
def test_course_folder_with_its_exercises_scores_full_marks(tmp_path):
    from tests.test_curriculum_lab import assemble
    lab = assemble("03", tmp_path / "tasks_lab")
    _edits(COURSE_EXERCISES)(lab)
    report = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "checks", "run", "01", "02", "03", "--lab", str(lab),
                          "--report", str(report)], cwd=manifest.KIT_ROOT, capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, LAB_LANG="en", LAB_HOME=str(tmp_path / "home")))
    data = json.loads(report.read_text())
    course = [t for t in data["tests"] if t["kind"] != "extension"]
    assert all(t["status"] == "pass" for t in course), run.stdout
    assert data["score"] == data["max_score"] == len(course), run.stdout
    assert f"score {data['score']}/{data['max_score']}" in run.stdout
    assert run.returncode == 0, run.stdout
