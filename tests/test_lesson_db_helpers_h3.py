"""Shared helpers lessons 13-15 (and others) call instead of writing their own: lesson_db's admission filler,
the learner's limit default, event_sent, wait_status / result_file / HoldList.wait_held / HelperGroup's start-up
failure in a lesson's own words, handshake.error_of.  The parts that need no server."""

import contextlib
import sys
import types

import pytest

from shared import handshake, lesson_db
from shared.hold_gate import HoldList
from shared.lesson_celery import append_event
from shared.proc import WaitTimeout


def test_fill_admission_adds_kit_rows_up_to_the_limit(monkeypatch):
    executed = []

    class Cursor:
        def executemany(self, query, rows):
            executed.append((" ".join(query.split()), rows))

    @contextlib.contextmanager
    def fake_kit_db(autocommit=True):
        yield Cursor()

    monkeypatch.setattr(lesson_db, "kit_db", fake_kit_db)
    monkeypatch.setattr(lesson_db, "active_jobs", lambda: 7)
    fillers = lesson_db.fill_admission(10)
    assert len(fillers) == 3 and len(set(fillers)) == 3
    assert executed == [("INSERT INTO export_jobs (id, payload, deadline_at) VALUES "
                         "(%s, '[]', DATE_ADD(NOW(6), INTERVAL 10 MINUTE))", [(f,) for f in fillers])]
    monkeypatch.setattr(lesson_db, "active_jobs", lambda: 12)  # already past the limit: nothing added
    assert lesson_db.fill_admission(10) == [] and executed[-1][1] == []


@pytest.mark.parametrize("signature, expected", [
    ("def admit_export(cur, limit=7): pass", 7),
    ("def admit_export(cur, limit=None): pass", None),
    ("def admit_export(cur, limit): pass", None),
    ("def admit_export(cur): pass", None),
])
def test_limit_default_reads_the_learners_admit_export(monkeypatch, signature, expected):
    module = types.ModuleType("state_store")
    exec(signature, module.__dict__)
    monkeypatch.setitem(sys.modules, "state_store", module)
    assert lesson_db.limit_default() == expected


def test_wait_status_says_a_lessons_own_words_when_given(monkeypatch):
    monkeypatch.setattr(lesson_db, "job_row", lambda job_id: {"status": "running", "attempts": 1})
    with pytest.raises(AssertionError, match="did not reach"):
        lesson_db.wait_status("j1", lesson_db.TERMINAL, seconds=0.05, interval=0.01)
    with pytest.raises(AssertionError, match="^late: running$"):
        lesson_db.wait_status("j1", lesson_db.TERMINAL, seconds=0.05, interval=0.01,
                              late=lambda row: f"late: {row['status']}")
    monkeypatch.setattr(lesson_db, "job_row", lambda job_id: {"status": "succeeded"})
    assert lesson_db.wait_status("j1", lesson_db.TERMINAL, late=lambda row: "never")["status"] == "succeeded"


def test_result_file_says_a_lessons_own_words_for_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(lesson_db, "WORK", tmp_path)
    with pytest.raises(AssertionError, match="^no such file here$"):
        lesson_db.result_file({"result_ref": "artifacts/missing.json"}, "no such file here")
    with pytest.raises(AssertionError, match="result_ref is empty"):  # that one keeps the shared words
        lesson_db.result_file({"result_ref": ""}, "no such file here")


@pytest.mark.parametrize("failed", [None, "a racer failed to start:\n"])
def test_helper_group_start_up_failure_in_a_lessons_words(tmp_path, failed):
    script = tmp_path / "dies.py"
    script.write_text("print('cannot import the learner module')\nraise SystemExit(3)\n")
    with pytest.raises(AssertionError) as raised:
        handshake.HelperGroup([str(script)], ["A", "B"], tmp_path / "hs", "racer", env={"PATH": "/usr/bin:/bin"},
                              failed=failed)
    said = str(raised.value)
    assert said.startswith(failed or "racer process ")
    assert "cannot import the learner module" in said


def test_event_sent(monkeypatch):
    answers = {"e1": [{"sent_at": "2026-01-01 10:00:00"}], "e2": [{"sent_at": None}], "e3": []}
    monkeypatch.setattr(lesson_db, "sql", lambda query, args=(): answers[args[0]])
    assert [lesson_db.event_sent(e) for e in ("e1", "e2", "e3")] == [True, False, False]


def test_error_of_is_a_helpers_failed_call_cut_to_its_limit():
    assert handshake.error_of(ValueError("bad key")) == {"error": "ValueError: bad key"}
    assert handshake.error_of(RuntimeError("x" * 400), 200) == {"error": ("RuntimeError: " + "x" * 400)[:200]}
    assert len(handshake.error_of(RuntimeError("x" * 400))["error"]) == 300


def test_wait_held_says_a_lessons_own_words_when_no_worker_is_held(tmp_path):
    gate = HoldList(tmp_path, "lx")
    with pytest.raises(WaitTimeout):
        gate.wait_held(["job-1"], 0.05, "nothing", interval=0.01)
    with pytest.raises(AssertionError, match="^job-1 was never held$"):
        gate.wait_held(["job-1"], 0.05, "nothing", interval=0.01, late=lambda: "job-1 was never held")
    append_event(gate.events, "hold", job="job-1", phase="write")
    assert gate.wait_held(["job-1"], 1, "held", phase="write", late=lambda: "never")["job"] == "job-1"
