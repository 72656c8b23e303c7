"""Where a verifier, and every process it starts, writes its logs, reports and handshake files: the runner's
TASKLAB_LOG_DIR (the lesson's log folder, kept after the run and named by its "full logs" line), else
.check-logs/ in the folder it runs in (a verifier started by hand)."""

from __future__ import annotations

import os
from pathlib import Path

LOG_DIR = Path(os.environ.get("TASKLAB_LOG_DIR") or Path.cwd() / ".check-logs")
