"""Lesson 16's worker logs as the judge reads them, 16.6 and 16.10 (judge-side kit module, not a lesson
file): the JSON phase lines the learner's log_phase writes (event=export_phase), and what must never be in
a worker log — a product description, a password, a URL with credentials.  Secrets found are quoted
redacted, never printed.
"""

from __future__ import annotations

import json
import os
import re

from shared.settings import env_file_values, redact, secrets_in
from shared.i18n import t

DESCRIPTION = re.compile(r"sample product \d+ for export drills")  # the kit's sample products' descriptions
CREDENTIAL_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s/@:]*:(?!\*\*@)[^\s/@]+@", re.I)


def phase_lines(text: str) -> list[dict]:
    """Every phase line of a log, as the dict log_phase wrote (whatever precedes its JSON on the line)."""
    found = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or "export_phase" not in line:
            continue
        try:
            data = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("event") == "export_phase":
            found.append(data)
    return found


def job_phase_lines(stack, job_id: str, deliveries: int) -> list[dict]:
    """The job's phase lines in the main worker's log, once `deliveries` of its deliveries have ended: the task
    writes its lines before it returns, and the probe a delivery's end after that, so every line is there."""
    stack.wait_ended(job_id, deliveries)
    return [p for p in phase_lines(stack.worker.log_text()) if p.get("job_id") == job_id]


def worker_logs(stack) -> str:
    """The whole log of every matrix worker (lab16_fixture.Stack), one text."""
    return "\n".join(proc.log_text() for proc in (stack.worker, stack.cache_worker) if proc is not None)


def log_leaks(text: str) -> list[str]:
    """What `text` (the worker logs) leaks, said for the learner: descriptions, passwords, credential URLs."""
    leaks = []
    descriptions = DESCRIPTION.findall(text)
    if descriptions:
        leaks.append(t("a product description (such as '{descriptions}')", descriptions=descriptions[0]))
    secrets = secrets_in(env_file_values()) + secrets_in({k: v for k, v in os.environ.items() if k in
                                                          ("CELERY_RESULT_BACKEND", "DATABASE_URL")})
    leaking = next((line for line in text.splitlines() if any(secret in line for secret in secrets)), None)
    if leaking is not None:  # quote the line around the leak, redacted, so the field that leaks is seen
        shown = redact(leaking)
        at = shown.find("***")
        excerpt = ("…" if at > 100 else "") + shown[max(0, at - 100): at + 60] + ("…" if len(shown) > at + 60 else "")
        leaks.append(t("a password or a connection URL with its password (this line: {excerpt})", excerpt=excerpt))
    if CREDENTIAL_URL.search(text):
        leaks.append(t("a URL with credentials (user:password@)"))
    return leaks
