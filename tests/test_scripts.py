"""shared/scripts.py: a script run as the lesson runs it, its output taken as evidence."""

import subprocess

import pytest

from shared import scripts
from shared.scripts import Script, printed_dicts, run_script


class Noted:
    """A stand-in for a check: what was noted on it."""

    def __init__(self):
        self.notes = []

    def note(self, text):
        self.notes.append(text)


def test_run_script_masks_secrets_and_notes_its_tail(monkeypatch, tmp_path):
    monkeypatch.setattr(scripts, "WORK", tmp_path)
    monkeypatch.setenv("LABTEST_PASSWORD", "s3cret-value")
    (tmp_path / "talk.py").write_text("import sys\nprint('one')\nprint()\nprint('  two', sys.argv[1])\n"
                                      "print('pw=s3cret-value')\nraise SystemExit(3)\n")
    done = run_script(["talk.py", "arg"], 20)
    assert isinstance(done, Script)
    code, output, lines = done  # unpacks as lesson 15's runner did
    assert code == 3 and "s3cret-value" not in output and "pw=***" in output
    assert lines == ["one", "  two arg", "pw=***"]  # empty lines left out
    c = Noted()
    done.tail(c, 2, width=5)
    assert c.notes == ["    two", "  pw=**"]
    done.tail(c, 1, width=None)
    assert c.notes[-1] == "  pw=***"


def test_run_script_fails_with_its_message_when_late(monkeypatch, tmp_path):
    monkeypatch.setattr(scripts, "WORK", tmp_path)
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    with pytest.raises(AssertionError, match="^slow.py did not finish$"):
        run_script(["slow.py"], 0.5, late="slow.py did not finish")
    with pytest.raises(subprocess.TimeoutExpired):
        run_script(["slow.py"], 0.5)


def test_printed_dicts_reads_each_dict_a_script_printed_and_nothing_else():
    lines = ["submitted 42", "{'job_id': '42', 'rows': 1}", "result: {'first': 'a', 'same_slot': None}",
             "{'broken': ", "{1, 2}", "{'deep': " + "[" * 100_000 + "]" * 100_000 + "}",
             "{'x': __import__('os')}", "{}"]
    assert printed_dicts(lines) == [{"job_id": "42", "rows": 1}, {"first": "a", "same_slot": None}, {}]
