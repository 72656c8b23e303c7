"""shared/tap.py's note_lines (a run's last lines, indented under the note that introduces them),
exception_lines (the lines that end a traceback in a learner process's output) and what an unexpected
error prints (its own traceback's end, after that of an error it replaced), each on its own."""

from __future__ import annotations

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


def _nested(messages: list[str]):
    """Raise each message as a learner error, each from the `finally` of the one before (as lesson 07's
    nested clean-ups do when the learner's code breaks them all)."""
    if len(messages) == 1:
        raise _raised(messages[0])
    try:
        _nested(messages[:-1])
    finally:
        raise _raised(messages[-1])


def test_a_learner_error_prints_its_own_traceback_end_after_the_notes(capsys):
    def body(c):
        c.note("before")
        raise _raised("broken transit")
    printed = _printed(capsys, body)
    assert printed[:2] == ["unexpected error: ValueError: broken transit", "before"]
    assert printed[2:] == (TRACEBACK + "ValueError: broken transit").splitlines()[-6:]


def test_a_first_error_replaced_by_one_raised_in_a_finally_is_printed_first(capsys):
    printed = _printed(capsys, lambda c: _nested(["first", "second in finally"]))
    assert printed[0] == "unexpected error: ValueError: second in finally"
    first, second = (TRACEBACK + "ValueError: first").splitlines()[-6:], \
        (TRACEBACK + "ValueError: second in finally").splitlines()[-6:]
    assert printed[1:] == [*first, "while that error was handled, another was raised:", *second]


def test_nested_clean_ups_keep_every_replaced_error_in_order(capsys):
    steps = ["work broke", "stop_worker broke", "close_downstream broke", "capture_take broke", "close_store broke"]
    printed = _printed(capsys, lambda c: _nested(steps))
    ends = [line for line in printed[1:] if line.startswith("ValueError: ")]
    assert ends == [f"ValueError: {step}" for step in steps]
    assert printed.count("while that error was handled, another was raised:") == 4


def test_a_very_long_chain_keeps_the_oldest_errors_and_the_last(capsys):
    steps = [f"step {n}" for n in range(15)]
    printed = _printed(capsys, lambda c: _nested(steps))
    ends = [line for line in printed[1:] if line.startswith("ValueError: ")]
    assert ends == [f"ValueError: step {n}" for n in range(9)] + ["ValueError: step 14"]


def test_a_finding_in_a_clean_up_does_not_hide_the_learner_error(capsys):
    from shared.probe import shaped

    def body(c):
        try:
            raise _raised("work broke")
        finally:
            shaped("stop_worker", None)  # the kit's own assert (shared/), as when a probe breaks down
    printed = _printed(capsys, body)
    # A finding: its own words are the reason, not "unexpected error"; the learner error it hid follows.
    assert printed[0] == "the process running your code answered stop_worker out of shape: None"
    assert "ValueError: work broke" in printed


def test_a_library_error_in_between_does_not_hide_the_learner_error(capsys):
    def body(c):
        try:
            try:
                raise _raised("work broke")
            finally:
                raise OSError("release failed")  # the kit's own clean-up, not a finding
        finally:
            raise _raised("close_store broke")
    printed = _printed(capsys, body)
    ends = [line for line in printed[1:] if line.startswith(("ValueError: ", "OSError"))]
    assert ends == ["ValueError: work broke", "ValueError: close_store broke"]


def test_a_cycle_of_contexts_ends(capsys):
    def body(c):
        first, second = _raised("one"), _raised("two")
        first.__context__, second.__context__ = second, first
        raise second
    printed = _printed(capsys, body)
    assert [line for line in printed if line.startswith("ValueError: ")] == ["ValueError: one", "ValueError: two"]


def test_a_checker_finding_hidden_by_a_clean_up_error_is_still_said(capsys):
    def body(c):
        try:
            raise AssertionError("the job never finished")
        finally:
            raise _raised("stop_worker broke")
    printed = _printed(capsys, body)
    assert printed[0] == "unexpected error: ValueError: stop_worker broke"
    assert "AssertionError: the job never finished" in printed
    assert printed.index("AssertionError: the job never finished") < printed.index("ValueError: stop_worker broke")


def test_a_library_error_it_turned_into_another_is_not_printed(capsys):
    def body(c):
        try:
            {}["missing"]
        except KeyError:
            raise ValueError("no such job")  # noqa: B904 -- the context is what this test is about
    printed = _printed(capsys, body)
    assert printed[0] == "unexpected error: ValueError: no such job"
    assert not any("KeyError" in line for line in printed) and printed[-1] == "ValueError: no such job"
