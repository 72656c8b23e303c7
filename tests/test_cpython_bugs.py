"""CPython bugs a kit probe works around, tried on every Python 3.11+ this machine has.

The kit's own .venv may run a fixed Python while a learner's runs an older one (Debian 12's python3 is
3.11.2), so each workaround is tried with the suite's interpreter and with the system's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checks.sandbox import verifiers_dir
from shared import manifest

LESSON06_VERIFIERS = verifiers_dir(manifest.lesson("06"))
PYTHONS = sorted({sys.executable, *[p for p in ("/usr/bin/python3",) if Path(p).exists()]})


def _version(python: str) -> tuple[int, ...]:
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True,
                         text=True, timeout=30)
    return tuple(int(part) for part in out.stdout.split()) if out.returncode == 0 else ()


def _ends(python: str, within: float) -> bool:
    """gh-94440's four lines with lesson 06's recording pool: does shutdown(wait=True) return within
    `within` seconds?"""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(LESSON06_VERIFIERS)!r})
        import lab06_learner
        lab06_learner._REC.update(lab06_learner._new_record())
        pool = lab06_learner._recording_pool(None)(1)
        pool.submit(int).result()
        pool.submit(int).cancel()
        pool.shutdown(wait=True)
        print("ended")
    """)
    # Its own session: a hung pool's workers are in its group, and go with it.
    proc = subprocess.Popen([python, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group is still this one's
        proc.communicate()
        return False
    assert proc.returncode == 0, err
    return out.strip() == "ended"


@pytest.mark.parametrize("python", PYTHONS)
def test_lesson06_recording_pool_shuts_down_where_cpython_would_hang(python):
    """gh-94440 (fixed in 3.11.4): shutdown(wait=True) after a call was cancelled can wait forever -- what
    ending a `with` block whose map() failed on a local function does.  Lesson 06.4's probe must end.

    Whether a plain pool hangs here is a race (the cancel must come before the pool's manager thread sees
    the call): on Debian's 3.11.2 it hung 5 times of 5 on an idle machine, and this test failed there
    without the workaround, but under load the manager can win, so that is not asserted."""
    if _version(python) < (3, 11):
        pytest.skip(f"{python} is not Python 3.11+")
    assert _ends(python, within=60)
