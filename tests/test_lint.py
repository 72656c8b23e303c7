"""The kit follows its own ruff settings (pyproject.toml).

Most of what it catches would also fail at run time — but only when that line runs, and a verifier's
error path may run for the first time in front of a learner."""

import subprocess
import sys

from shared.manifest import KIT_ROOT


def test_ruff_finds_nothing():
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=KIT_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
