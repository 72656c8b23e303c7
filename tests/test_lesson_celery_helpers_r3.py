"""shared.lesson_celery.publish_until_sent: the outbox lessons' relay run until an event is sent (lessons 12, 14)."""

import pytest

from shared import lesson_celery
from shared.lesson_celery import publish_until_sent


class Noted:
    """A stand-in for a check: what was noted on it."""

    def __init__(self):
        self.notes = []

    def note(self, text):
        self.notes.append(text)


@pytest.fixture
def work(monkeypatch, tmp_path):
    """A work folder whose publisher.py counts its runs (runs.txt) and prints its run number last."""
    monkeypatch.setattr(lesson_celery, "WORK", tmp_path)
    (tmp_path / "publisher.py").write_text(
        "from pathlib import Path\n"
        "runs = Path('runs.txt')\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "print('publishing')\nprint()\nprint(f'sent {n}' + 'x' * 300 * (n == 9))\n")
    return tmp_path


def sent_after(work, n: int):
    """A stand-in for lesson_db.event_sent: True once publisher.py has run n times."""
    runs = work / "runs.txt"
    return lambda event_id: runs.exists() and int(runs.read_text()) >= n


def test_publish_until_sent_runs_the_publisher_until_the_event_is_sent(work):
    c = Noted()
    # the last non-empty line
    assert publish_until_sent(c, "event-id", "publisher failed", sent_after(work, 3)) == "sent 3"
    assert (work / "runs.txt").read_text() == "3" and c.notes == []


def test_publish_until_sent_cuts_the_last_line_to_200(work):
    (work / "runs.txt").write_text("8")
    last = publish_until_sent(Noted(), "event-id", "publisher failed", sent_after(work, 9))
    assert last == ("sent 9" + "x" * 300)[:200]


def test_publish_until_sent_fails_with_its_words_when_still_unsent(work):
    with pytest.raises(AssertionError) as raised:
        publish_until_sent(Noted(), "0123456789abcdef", "publisher failed", sent_after(work, 99), runs=2)
    assert str(raised.value) == ("event 01234567… still unsent after 2 runs of python publisher.py (last output: "
                                 "sent 2)")
    assert (work / "runs.txt").read_text() == "2"


def test_publish_until_sent_notes_a_failed_run_and_says_the_callers_words(work):
    (work / "publisher.py").write_text("print('a')\nprint('b')\nprint('c')\nprint('  d')\nraise SystemExit(1)\n")
    c = Noted()
    with pytest.raises(AssertionError, match=r"^python publisher\.py failed \(output below\)$"):
        publish_until_sent(c, "event-id", "python publisher.py failed (output below)",
                           lambda event_id: pytest.fail("asked after a failed run"))
    assert c.notes == ["  b", "  c", "    d"]
