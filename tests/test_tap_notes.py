"""shared/tap.py's note_lines (a run's last lines, indented under the note that introduces them),
exception_lines (the lines that end a traceback in a learner process's output) and a learner traceback
printed once when the check noted it already (lab07_taskcenter_fixture.ask), each on its own."""

from __future__ import annotations

import importlib
import sys

import pytest

from shared.manifest import KIT_ROOT
from shared.probe_wire import rebuild
from shared.tap import Tap, exception_lines


def _printed(capsys, body) -> list[str]:
    """The `# ` lines one check printed under its TAP line (its seconds left out)."""
    tap = Tap()
    with tap.check("99.1") as c:
        body(c)
    lines = capsys.readouterr().out.splitlines()
    return [line[2:] for line in lines if line.startswith("# ") and not line.startswith("# seconds:")]


def test_note_lines_notes_the_last_lines_indented_all_of_them_when_no_count(capsys):
    def body(c):
        c.note("output:")
        c.note_lines("one\ntwo\nthree\nfour", last=2)
        c.note_lines(["a", "b"])
        c.note_lines([] or ["(no output)"], last=4)
    assert _printed(capsys, body) == ["output:", "  three", "  four", "  a", "  b", "  (no output)"]


def test_exception_lines_are_the_lines_ending_a_traceback_stripped_in_order():
    output = ('Traceback (most recent call last):\n  File "verify_states.py", line 3, in <module>\n'
              "    main()\n  TypeError: bad operand\nprinted Errors: 2\nasyncio.exceptions.CancelledError\n"
              "ValueError\nSystemExit: 1\n")
    assert exception_lines(output) == ["TypeError: bad operand", "asyncio.exceptions.CancelledError", "ValueError"]
    assert exception_lines("all fine\n") == []


TRACEBACK = 'Traceback (most recent call last):\n' + "".join(
    f'  File "taskcenter/worker.py", line {n}, in step{n}\n    transit(job)\n' for n in range(1, 5))


def _raised(message: str) -> BaseException:
    return rebuild({"module": "builtins", "type": "ValueError", "message": message,
                    "traceback": f"{TRACEBACK}ValueError: {message}\n"})


@pytest.fixture()
def fixture07(monkeypatch):
    """lab07_taskcenter_fixture, its probe replaced by one whose steps raise what the test says."""
    monkeypatch.syspath_prepend(str(KIT_ROOT / "lessons" / "07-choose-executor" / "verifiers"))
    module = importlib.import_module("lab07_taskcenter_fixture")
    yield module
    sys.modules.pop("lab07_taskcenter_fixture", None)


class _Raising:
    def __init__(self, *raised):
        self.raised = list(raised)

    def call(self, target, *args, **kwargs):
        raise self.raised.pop(0)


def test_a_learner_traceback_the_check_noted_is_printed_once(capsys, fixture07, monkeypatch):
    monkeypatch.setattr(fixture07, "learner", _Raising(_raised("broken transit")))
    printed = _printed(capsys, lambda c: fixture07.ask(c, "run_one", 1))
    assert printed[0] == "unexpected error: ValueError: broken transit"
    assert printed.count("ValueError: broken transit") == 1
    assert printed[1:] == (TRACEBACK + "ValueError: broken transit").splitlines()[-6:]


def test_a_first_error_replaced_by_one_raised_in_a_finally_keeps_its_lines(capsys, fixture07, monkeypatch):
    monkeypatch.setattr(fixture07, "learner", _Raising(_raised("first"), _raised("second in finally")))

    def body(c):
        try:
            fixture07.ask(c, "run_one", 1)
        finally:
            fixture07.ask(c, "stop_worker", 1)
    printed = _printed(capsys, body)
    assert printed[0] == "unexpected error: ValueError: second in finally"
    assert printed.count("ValueError: first") == 1 and printed.count("ValueError: second in finally") == 1
    assert printed.index("ValueError: first") < printed.index("ValueError: second in finally")


def test_an_error_nobody_noted_still_prints_its_traceback_end(capsys):
    def body(c):
        c.note("before")
        raise _raised("not noted")
    printed = _printed(capsys, body)
    assert printed[:2] == ["unexpected error: ValueError: not noted", "before"]
    assert printed[2:] == (TRACEBACK + "ValueError: not noted").splitlines()[-6:]
