"""shared/probe.py's ask/shaped (a kit probe function's answer, read by its keys) and shared/probe_report.py's
run (the judge's side of a one-shot probe: a fresh report file, a bounded run, its report), each on its own."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from shared import probe_report
from shared.manifest import KIT_ROOT
from shared.probe import Probe, shaped
from shared.proc import is_zombie

KIT_PROBE = """
    def scenario(n, scale=1):
        return {"seen": n * scale, "lines": ["a"]}

    def number():
        return 7
"""


@pytest.fixture()
def learner(tmp_path):
    (tmp_path / "kit_probe.py").write_text(textwrap.dedent(KIT_PROBE), encoding="utf-8")
    probe = Probe(cwd=tmp_path, verifiers=tmp_path)
    yield probe
    probe.stop()


def test_ask_answers_a_dict_holding_its_keys_and_any_other_shape_fails_the_check(learner):
    assert learner.ask("kit_probe:scenario", 2, scale=3, keys=("seen", "lines"), timeout=20) == {"seen": 6,
                                                                                                  "lines": ["a"]}
    with pytest.raises(AssertionError, match=r"answered scenario out of shape: \{'seen': 2"):
        learner.ask("kit_probe:scenario", 2, keys=("seen", "stuck"))
    with pytest.raises(AssertionError, match="answered number out of shape: 7"):
        learner.ask("kit_probe:number")


def test_shaped_checks_keys_and_any_further_test_of_the_caller():
    got = {"waits": [0.1], "found_full": 1}
    assert shaped("produce", got, ("waits",)) is got
    assert shaped("produce", got, ok=isinstance(got["waits"], list)) is got
    with pytest.raises(AssertionError, match="answered produce out of shape"):
        shaped("produce", got, ok=isinstance(got["found_full"], list))
    with pytest.raises(AssertionError, match=r"answered load out of shape: \['x'\]"):
        shaped("load", ["x"])
    with pytest.raises(AssertionError) as said:
        shaped("load", "x" * 1000)
    assert len(str(said.value)) < 300  # the answer is quoted cut short


RUNNER = """
    import os, subprocess, sys, time
    from shared import probe_report

    how = sys.argv[1]
    print("started", flush=True)
    if how == "report":
        probe_report.write({"rows": [1, 2]})
    elif how == "big":
        probe_report.write({"events": ["x" * 1000] * 5000})
    elif how == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print("child", child.pid, flush=True)
        time.sleep(3600)
    sys.exit(0 if how != "fail" else 4)
"""


@pytest.fixture()
def runner(tmp_path, monkeypatch):
    (tmp_path / "kit_runner.py").write_text(textwrap.dedent(RUNNER), encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(KIT_ROOT))
    return lambda how, timeout=60.0, **kw: probe_report.run(["kit_runner.py", how], tmp_path / "logs", f"run-{how}",
                                                            timeout, tmp_path, **kw)


def test_run_hands_back_the_report_the_exit_code_and_the_output(runner, tmp_path):
    ran = runner("report")
    assert ran.report == {"rows": [1, 2]} and ran.code == 0 and ran.output.splitlines() == ["started"]
    assert (tmp_path / "logs" / "run-report.log").read_text() == "started\n"

    (tmp_path / "logs" / "run-fail.report.json").write_text('{"old": true}')  # an earlier run's report
    ran = runner("fail")
    assert ran.report is None and ran.code == 4 and "started" in ran.output  # a run that left none has none


def test_run_reads_a_record_of_any_size_only_when_asked(runner):
    assert runner("big").report is None  # over REPORT_LIMIT: not a report
    assert len(runner("big", limit=None).report["events"]) == 5000


def test_a_run_that_does_not_end_is_stopped_with_what_it_started(runner):
    started = time.monotonic()
    ran = runner("hang", timeout=5.0)
    assert ran.code is None and ran.report is None and time.monotonic() - started < 30
    child = int(next(line for line in ran.output.splitlines() if line.startswith("child")).split()[1])
    deadline = time.monotonic() + 10
    while not is_zombie(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert is_zombie(child), "the runner's own child outlived the stopped run"
    assert os.environ.get(probe_report.REPORT_ENV) is None  # the judge's environment is left as it was
