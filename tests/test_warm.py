"""shared/warm.py, the asking side of the fork server (its end-to-end behaviour: tests/test_forkserver.py)."""

import os
import subprocess
import sys

from shared import warm
from shared.manifest import KIT_ROOT as KIT


def test_off_by_default_outside_a_box():
    env = {k: v for k, v in os.environ.items() if k not in ("TASKLAB_BOXED", "TASKLAB_FORKSERVER")}
    assert subprocess.run([sys.executable, "-c", "from shared import warm; print(warm.enabled())"],
                          cwd=KIT, env=dict(env, PYTHONPATH=str(KIT)), capture_output=True, text=True
                          ).stdout.strip() == "False"


def test_a_judge_is_forked_warm_only_from_a_server_started_before_any_learner_process(monkeypatch):
    # No server prepared in this process: the caller (checks/judge.py) forks the judge itself.
    monkeypatch.setattr(warm, "_server", None)
    assert warm.start_entry("checks.judge", "run_forked", {}, [sys.executable], os.getcwd(), {}, 0, 1, ()) is None
