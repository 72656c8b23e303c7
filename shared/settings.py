"""The work folder's settings, read the way the learner's code reads them (the environment first, then
.env.tasks), and every form of a secret in them masked before output is shown or kept.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

WORK = Path.cwd()  # the work folder: a verifier, a probe and a lesson script all run in it


def env_file_values(path: Path = WORK / ".env.tasks") -> dict[str, str]:
    from shared.credentials import read_env_file
    return read_env_file(path)


def setting(name: str) -> str | None:
    """As load_dotenv(".env.tasks") sees it: a variable already in the environment wins."""
    return os.environ.get(name) or env_file_values().get(name)


def secrets_in(values: dict[str, str]) -> list[str]:
    """Every form of a secret that must never appear in output: passwords, encoded ones, whole URLs."""
    found = []
    for key, value in values.items():
        if not value or not any(part in key for part in ("PASSWORD", "URL", "BACKEND", "SECRET")):
            continue
        if "PASSWORD" in key:
            found.append(value)
        if "://" in value:
            found.append(value)
            password = urlsplit(value).password
            if password:
                found.append(password)
    return [s for s in dict.fromkeys(found) if len(s) >= 6]


def redact(text: str) -> str:
    """Learner output as evidence, with every known secret replaced by ***."""
    for secret in sorted(secrets_in(env_file_values()) + secrets_in(dict(os.environ)), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def describe_url(url: str) -> str:
    """host:port/db of a redis URL, without its credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}{parts.path or ''}"
