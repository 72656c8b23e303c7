"""shared/learner_spies.py: the stand-ins kit probes put next to learner code, each with a small test."""

import asyncio
import io
import threading
import time

import pytest

from shared import learner_spies
from shared.learner_spies import Lines, LoopTurn, ModuleView, fresh_module, replace_sleep, run_as_main, start_call


def test_lines_passes_text_through_and_hands_on_each_finished_line():
    real, seen = io.StringIO(), []
    out = Lines(real, seen.append)
    assert out.write("a\nb") == 3
    assert seen == ["a"]  # "b" is not finished yet
    out.write("c\n\nd\n")
    out.flush()
    assert real.getvalue() == "a\nbc\n\nd\n"
    assert seen == ["a", "bc", "", "d"]
    assert out.getvalue() == real.getvalue()  # anything else is the real stream's


@pytest.mark.parametrize("body, outcome", [
    ("print('hi')", "ok"),
    ("import sys; sys.exit(0)", "ok"),
    ("raise SystemExit", "ok"),
    ("import sys; sys.exit(3)", "SystemExit: 3"),
    ("raise ValueError('boom')", "ValueError: boom"),
    ("assert __name__ == '__main__'", "ok"),
])
def test_run_as_main_says_how_the_script_ended(tmp_path, capsys, body, outcome):
    script = tmp_path / "script.py"
    script.write_text(body + "\n")
    assert run_as_main(str(script)) == outcome
    printed = capsys.readouterr()
    assert ("Traceback" in printed.err) == outcome.startswith("ValueError")
    assert run_as_main(str(script), print_crash=False) == outcome
    assert "Traceback" not in capsys.readouterr().err


def test_fresh_module_is_a_new_copy_each_time(tmp_path, monkeypatch):
    (tmp_path / "counter.py").write_text("import time\ncount = 0\n")
    first = fresh_module("counter", tmp_path)
    first.count += 1
    second = fresh_module("counter", tmp_path)
    assert (first.count, second.count) == (1, 0) and first is not second
    monkeypatch.chdir(tmp_path)
    assert fresh_module("counter").count == 0  # the current folder by default


def test_start_call_runs_in_a_daemon_thread_and_keeps_what_it_returned_or_raised():
    thread, box = start_call(lambda a, b: a + b, 1, 2, name="adder")
    thread.join(10)
    assert (thread.daemon, thread.name, box["value"]) == (True, "adder", 3) and box["seconds"] >= 0
    thread, box = start_call(int, "x")
    thread.join(10)
    assert isinstance(box["error"], ValueError) and "value" not in box
    gate = threading.Event()
    thread, box = start_call(gate.wait)
    thread.join(0.01)
    assert thread.is_alive() and box == {}  # not returned yet: a bounded join says so
    gate.set()
    thread.join(10)
    assert box["value"] is True


def test_module_view_replaces_only_the_names_given():
    view = ModuleView(time, sleep="mine")
    assert view.sleep == "mine"
    assert view.monotonic is time.monotonic
    assert time.sleep != "mine"


def test_replace_sleep_whichever_way_time_was_imported(tmp_path):
    (tmp_path / "learner.py").write_text(
        "import time\nimport time as clock\nfrom time import sleep\nfrom time import sleep as nap\n")
    module = fresh_module("learner", tmp_path)
    calls = []
    undo = replace_sleep(module, calls.append)
    for sleep in (module.time.sleep, module.clock.sleep, module.sleep, module.nap):
        sleep(0)
    assert calls == [0, 0, 0, 0]
    assert module.clock.monotonic is time.monotonic  # the rest of time passes through
    assert time.sleep is not calls.append  # only the module's names changed
    undo()
    assert (module.time, module.clock, module.sleep, module.nap) == (time, time, time.sleep, time.sleep)


def test_replace_time_names_what_it_replaced_in_a_namespace():
    namespace = {"time": time, "now": time.time, "sleep": time.sleep, "other": 1}
    replaced = learner_spies.replace_time(namespace, "time", lambda: 42.0)
    assert replaced == {"time": time, "now": time.time}
    assert namespace["time"].time() == namespace["now"]() == 42.0
    assert namespace["time"].sleep is time.sleep and namespace["sleep"] is time.sleep
    namespace.update(replaced)
    assert namespace["time"] is time and namespace["now"] is time.time


def test_watch_loop_sleeps_notes_only_sleeps_on_a_running_loop(monkeypatch):
    monkeypatch.setattr(time, "sleep", time.sleep)  # restored after the test
    noted = []
    learner_spies.watch_loop_sleeps(lambda *where: noted.append(where))
    time.sleep(0)  # no loop running: not noted

    async def blocking():
        time.sleep(0.001)

    asyncio.run(blocking())
    assert len(noted) == 1
    place, function, seconds = noted[0]
    assert place.startswith("test_learner_spies.py:") and function == "blocking" and seconds == 0.001


def test_loop_turn_tells_work_that_gave_the_loop_back_from_work_that_did_not():
    async def main():
        blocked = LoopTurn()
        time.sleep(0)  # never awaits: the loop cannot turn
        assert blocked.turned is False
        blocked.cancel()
        turn = LoopTurn(asyncio.get_running_loop())
        await asyncio.sleep(0)
        assert turn.turned is True
        cancelled = LoopTurn()
        cancelled.cancel()
        await asyncio.sleep(0)
        assert cancelled.turned is False

    asyncio.run(main())
