"""Lesson 16's drills without a private redis-server — what runs where the services are Docker's and no
`redis-server` binary is on the host: the drills use the slot's own broker database instead, the broker-down
row points only the publisher at a dead port.  LAB_TEST_SLOT_BROKER=1 forces that path here (no box, so the
verifier sees the switch)."""

import json

from checks.results import PASS
from checks.runner import run_lesson
from checks.workdir import materialise
from shared import manifest

DATA = manifest.load()
LESSON = manifest.lesson("16", DATA)


def test_the_matrix_passes_on_the_slots_broker_database(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_BOX", "off")
    monkeypatch.setenv("LAB_TEST_SLOT_BROKER", "1")
    work = materialise(DATA["lessons"], LESSON, tmp_path / "work")
    result = run_lesson(LESSON, work, tmp_path / "logs", only={"16.3", "16.8"})
    ran = {c.id: c for c in result.checks if c.id in ("16.3", "16.8")}
    assert set(ran) == {"16.3", "16.8"}
    for check in ran.values():
        assert check.status == PASS, f"{check.id}: {check.status}: {check.message}\n" + "\n".join(check.notes)
    record = json.loads((tmp_path / "logs" / "verification-record.json").read_text(encoding="utf-8"))
    assert "the slot's broker database" in json.dumps(record), "the drills did not take the fallback"
    broker_down = next(note for note in ran["16.8"].notes if "broker_unavailable" in note)
    assert broker_down.startswith("pass"), broker_down
