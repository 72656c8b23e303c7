"""checks/box.py: whether a box can be made here, asked again until it can."""

import subprocess

from checks import box


def test_a_probe_that_failed_once_is_tried_again_and_only_success_is_remembered(monkeypatch):
    # One failed bubblewrap probe (a passing strain) once left a whole test worker judging unboxed: with
    # LAB_BOX=auto a grader would have run strangers' code bare from then on.
    real, calls = subprocess.run, []

    def flaky(argv, **kwargs):
        calls.append(argv)
        if len(calls) == 1:
            return subprocess.CompletedProcess(argv, 1, "", "bwrap: Creating new namespace failed: try again\n")
        return real(argv, **kwargs)

    monkeypatch.setattr(box, "_BOXES_MADE", False)
    monkeypatch.setattr(box.subprocess, "run", flaky)
    if real([box._bwrap() or "false", "--version"], capture_output=True).returncode != 0:
        return  # no bubblewrap here: nothing to retry into
    assert box.availability() == (True, "")
    assert len(calls) == 2
    assert box.availability() == (True, "") and len(calls) == 2  # remembered: no probe again


def test_a_probe_that_always_fails_says_why_and_is_not_remembered(monkeypatch):
    monkeypatch.setenv("LAB_LANG", "en")
    monkeypatch.setattr(box, "_BOXES_MADE", False)
    monkeypatch.setattr(box, "_bwrap", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(box.time, "sleep", lambda _s: None)
    calls = []

    def failing(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "bwrap: No permissions to create new namespace\n")

    monkeypatch.setattr(box.subprocess, "run", failing)
    ok, why = box.availability()
    assert not ok and "No permissions to create new namespace" in why
    ok, _why = box.availability()
    assert not ok and len(calls) == 6  # three tries each time: a failure is never the answer for good
