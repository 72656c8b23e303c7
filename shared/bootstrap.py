"""Create .venv and install the pinned packages — once, and again only when the pins change.

Run by make before any target that needs the virtualenv.  Standard library only:
it runs on the system Python, which may be older than the kit needs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
VENV = KIT_ROOT / ".venv"
STAMP = VENV / ".installed"
REQUIREMENTS = KIT_ROOT / "requirements-dev.txt"


sys.path.insert(0, str(KIT_ROOT))
from shared.i18n import t  # noqa: E402 - the kit's own folder first: this runs as a script on the system Python


def say(message: str) -> None:
    print(message, flush=True)


def pins_digest() -> str:
    text = (KIT_ROOT / "requirements.txt").read_bytes() + REQUIREMENTS.read_bytes()
    return hashlib.sha256(text).hexdigest()


def find_python() -> str | None:
    """The interpreter .venv is made from.

    Chosen with PYTHON= (the Makefile passes it on as TASKLAB_PYTHON): that one.  Otherwise the system's
    own Python 3.11+ in /usr/bin comes first: distributions build theirs with profile-guided and link-time
    optimisation, and the kit starts hundreds of short interpreters (judges, probes, workers), which run
    about 1.5x slower on a Python compiled without them (pyenv's default build, say).  Then this
    interpreter, then the newest python3.1x on PATH.
    """
    chosen = os.environ.get("TASKLAB_PYTHON")
    if chosen:
        found = shutil.which(chosen)
        return found if found and _can_make_venv(found) else None
    for name in NEWEST_FIRST:
        system = SYSTEM_BIN / name
        if system.exists() and _can_make_venv(str(system)):
            return str(system)
    if sys.version_info >= (3, 11):
        return sys.executable
    for name in NEWEST_FIRST:
        found = shutil.which(name)
        if found:
            return found
    return None


SYSTEM_BIN = Path("/usr/bin")
NEWEST_FIRST = ("python3.14", "python3.13", "python3.12", "python3.11")


def _can_make_venv(python: str) -> bool:
    """3.11 or newer, with venv's pip (Debian and Ubuntu ship it apart, in python3-venv)."""
    probe = subprocess.run([python, "-c", "import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))"],
                           capture_output=True)
    return probe.returncode == 0


def main() -> int:
    if STAMP.exists() and STAMP.read_text().strip() == pins_digest():
        return 0
    python = find_python()
    if python is None:
        say(t("Python 3.11 or newer is needed. Debian/Ubuntu/WSL: sudo apt-get install -y python3.11 python3.11-venv"))
        return 2
    venv_python = VENV / "bin" / "python"
    if not venv_python.exists():
        say(t("creating .venv …"))
        result = subprocess.run([python, "-m", "venv", str(VENV)])
        if result.returncode != 0:
            say(t("could not create .venv. Debian/Ubuntu: sudo apt-get install -y python3-venv"))
            return 2
    say(t("installing the pinned packages (about 20 s the first time) …"))
    result = subprocess.run([str(venv_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                             "-r", str(REQUIREMENTS)])
    if result.returncode != 0:
        say(t("installing the packages failed: check the network or your PyPI mirror, then run the same make "
              "command again."))
        return 2
    STAMP.write_text(pins_digest() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
