"""Which interpreter .venv is made from (shared/bootstrap.py find_python)."""

import sys

from shared import bootstrap


def _fake_python(folder, name, works=True):
    path = folder / name
    path.write_text(f"#!/bin/sh\nexit {0 if works else 1}\n")
    path.chmod(0o755)
    return path


def test_the_systems_own_python_comes_before_this_one(tmp_path, monkeypatch):
    monkeypatch.delenv("TASKLAB_PYTHON", raising=False)
    monkeypatch.setattr(bootstrap, "SYSTEM_BIN", tmp_path)
    system = _fake_python(tmp_path, "python3.11")
    assert bootstrap.find_python() == str(system)


def test_a_system_python_that_cannot_make_a_venv_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.delenv("TASKLAB_PYTHON", raising=False)
    monkeypatch.setattr(bootstrap, "SYSTEM_BIN", tmp_path)
    _fake_python(tmp_path, "python3.12", works=False)  # no python3-venv, or older than 3.11
    assert bootstrap.find_python() == sys.executable


def test_python_chosen_with_make_python_is_used_or_refused(tmp_path, monkeypatch):
    chosen = _fake_python(tmp_path, "mypython")
    monkeypatch.setenv("TASKLAB_PYTHON", str(chosen))
    assert bootstrap.find_python() == str(chosen)
    monkeypatch.setenv("TASKLAB_PYTHON", str(_fake_python(tmp_path, "oldpython", works=False)))
    assert bootstrap.find_python() is None  # main() then says Python 3.11+ is needed
