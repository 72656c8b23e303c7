"""Where the kit keeps what it makes: KIT_ROOT/.state/ — work copies, logs, reports, progress, and the
private servers' data under .state/services/.  LAB_HOME moves everything but the servers (tests give each
run its own).

Before December 2026 this folder was called .lab/, a name that also meant the learner's folder (LAB=,
--lab).  A checkout that still has .lab/ keeps working: state_root() names it until move_old() — called
first by the kit's commands, never on import — renames it, with a one-line notice.  Not while one of its
private servers runs from there (a running MariaDB keeps writing to the paths it was started with): the
notice then says how to let the kit move it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from shared.i18n import t
from shared.manifest import KIT_ROOT

NAME = ".state"
OLD_NAME = ".lab"  # the name before December 2026


def state_root(root: Path = KIT_ROOT) -> Path:
    """The kit's state folder: .state/, or an old .lab/ not moved yet."""
    new, old = root / NAME, root / OLD_NAME
    if not new.exists() and old.is_dir() and not old.is_symlink():
        return old
    return new


def _server_running_from(folder: Path) -> bool:
    """Does a pid file of the kit's private servers (services/NAME.pid) name a process that still runs?"""
    for pid_file in (folder / "services").glob("*.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if pid > 0 and Path(f"/proc/{pid}").exists():
            return True
    return False


def move_old(root: Path = KIT_ROOT) -> None:
    """Rename an old .lab/ to .state/ (once; said on stderr)."""
    old = state_root(root)
    if old.name != OLD_NAME:
        return
    if _server_running_from(old):
        print(t("note: the kit's state folder is now .state/; .lab/ stays in use while its servers run "
                "(run `make services-down` once and the kit moves it)"), file=sys.stderr)
        return
    try:
        os.rename(old, root / NAME)
    except OSError:  # another command moved it first, or the file system refuses: .lab/ stays in use
        return
    print(t("note: the kit's state folder .lab/ is now .state/ (moved)"), file=sys.stderr)
