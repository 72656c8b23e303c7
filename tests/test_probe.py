"""The bridge between judge and learner code (shared/probe.py) and the hold/release gate
(shared/hold_gate.py), each tested on its own."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from shared import probe as P
from shared.hold_gate import Gate, read_list

LEARNER = """
    import os, threading, time

    LIMIT = 7
    _barrier = threading.Barrier(2, timeout=10)

    class InvalidMove(ValueError):
        pass

    def add(a, b=1):
        return a + b

    def row():
        import datetime, decimal
        return {"at": datetime.datetime(2026, 12, 5, 4, 0, 1, 5), "price": decimal.Decimal("1.50"),
                "pair": (1, "x"), "tags": {"a"}, "blob": b"\\x00\\x01", "none": None}

    def refuse():
        raise InvalidMove("queued -> succeeded is not allowed")

    def meet():
        _barrier.wait()  # returns only when two calls run at once
        return "met"

    def sleep_forever():
        time.sleep(3600)

    def flood():
        # every descriptor this process holds gets a line without end
        for fd in range(3, 64):
            try:
                os.write(fd, b"x" * (5 << 20))
            except OSError:
                pass
        return "done"

    def mine():
        return object()

    def die():
        os._exit(3)
"""


@pytest.fixture()
def learner(tmp_path):
    (tmp_path / "learner_mod.py").write_text(textwrap.dedent(LEARNER), encoding="utf-8")
    probe = P.Probe(cwd=tmp_path, verifiers=tmp_path)
    yield probe
    probe.stop()


def test_values_cross_as_plain_data(learner):
    assert learner.call("learner_mod:add", 2, b=3) == 5
    got = learner.call("learner_mod:row")
    assert got == {"at": datetime.datetime(2026, 12, 5, 4, 0, 1, 5), "price": decimal.Decimal("1.50"),
                   "pair": (1, "x"), "tags": {"a"}, "blob": b"\x00\x01", "none": None}
    assert isinstance(learner.call("learner_mod:mine"), P.Opaque)  # a learner's object: its repr only


def test_a_learner_exception_is_rebuilt_as_the_nearest_class_the_judge_knows(learner):
    with pytest.raises(ValueError) as raised:  # InvalidMove(ValueError), defined by the learner
        learner.call("learner_mod:refuse")
    assert isinstance(raised.value, P.LearnerRaised)
    assert raised.value.type_name == "InvalidMove" and "not allowed" in str(raised.value)


def test_the_module_stand_in(learner):
    mod = learner.module("learner_mod", "add")
    assert mod.add(1) == 2 and mod.LIMIT == 7
    with pytest.raises(AssertionError, match="learner_mod.py has no claim"):
        learner.module("learner_mod", "claim")
    with pytest.raises(AssertionError, match="cannot import no_such_module"):
        learner.module("no_such_module")


def test_calls_from_several_judge_threads_run_at_once(learner):
    results = []
    threads = [threading.Thread(target=lambda: results.append(learner.call("learner_mod:meet", timeout=20)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == ["met", "met"]


def test_a_call_that_never_returns_fails_and_the_next_call_gets_a_fresh_probe(learner):
    with pytest.raises(P.ProbeError, match="did not return within 0.5s"):
        learner.call("learner_mod:sleep_forever", timeout=0.5)
    assert learner.call("learner_mod:add", 1) == 2


def test_a_probe_that_dies_or_floods_fails_the_call(learner):
    with pytest.raises(P.ProbeError, match="ended"):
        learner.call("learner_mod:die")
    with pytest.raises(P.ProbeError, match="over-long answer"):
        learner.call("learner_mod:flood", timeout=30)
    assert learner.call("learner_mod:add", 1) == 2


def test_decode_refuses_what_it_does_not_know():
    for bad in ({"$eval": "x"}, {"$object": "X"}, {"a": 1, "$tuple": []}):
        with pytest.raises(ValueError):
            P.decode(bad)


# ---------------------------------------------------------------- the hold/release gate

def test_a_pause_waits_for_its_release_once(tmp_path):
    events = []
    gate = Gate(str(tmp_path), "labX", str(tmp_path / "hold.txt"), backstop=60,
                record=lambda k, **f: events.append((k, f)))
    (tmp_path / "hold.txt").write_text("job-1\n")
    assert read_list(str(tmp_path / "hold.txt")) == ["job-1"]
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (gate.pause("job-1", path="p"), done.set()))
    waiter.start()
    # The hold is a recorded fact before anything is released.
    for _ in range(500):
        if events:
            break
        threading.Event().wait(0.01)
    assert events == [("hold", {"job": "job-1", "path": "p"})] and not done.is_set()
    (tmp_path / "labX-release-job-1").touch()
    waiter.join(10)
    assert done.is_set() and events[-1] == ("release", {"job": "job-1", "path": "p", "released": True})
    gate.pause("job-1")  # the second pause of the same job does not wait
    assert len(events) == 2


def test_phases_are_listed_apart(tmp_path):
    (tmp_path / "hold.txt").write_text("write job-1\nclaim job-2\n")
    gate = Gate(str(tmp_path), "labX", str(tmp_path / "hold.txt"), backstop=60, record=lambda *a, **f: None)
    assert gate.listed("write") == ["job-1"] and gate.listed("claim") == ["job-2"]


def test_the_first_write_of_a_held_job_waits_in_a_worker_process(tmp_path):
    """Installed in a process of its own (it wraps open()): the held write waits for the release file,
    another job's write does not."""
    (tmp_path / "hold.txt").write_text("job-7\n")
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from shared.hold_gate import Gate
        events = []
        Gate({str(tmp_path)!r}, "labX", {str(tmp_path / "hold.txt")!r}, backstop=60,
             record=lambda kind, **f: print(json.dumps([kind, f]), flush=True)).hold_first_writes()
        open({str(tmp_path / "other.json")!r}, "w").write("{{}}")
        print(json.dumps(["other written", {{}}]), flush=True)
        open({str(tmp_path / "artifacts-job-7.json")!r}, "w").write("{{}}")
        print(json.dumps(["held written", {{}}]), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
    assert first[0] == "other written" and second[0] == "hold"
    (tmp_path / "labX-release-job-7").touch()
    with proc.stdout:
        rest = [json.loads(line) for line in proc.stdout]
    proc.wait(30)
    assert [r[0] for r in rest] == ["release", "held written"] and rest[0][1]["released"] is True
