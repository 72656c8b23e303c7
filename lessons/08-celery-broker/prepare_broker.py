"""Lesson 08, step 2: create the local broker's credentials once.

Run:  python prepare_broker.py      (in tasks_lab, on the Linux/WSL2 file system)

Writes two files and never prints a secret:
  .env.tasks              TASK_BROKER_PASSWORD plus the two Celery URLs (mode 0600)
  broker-local/redis.conf the Redis server's settings, same password (folder mode 0700)
If either already exists it stops without touching anything: a second password would
lock the running broker out of its own clients.  Both paths go into .gitignore.
"""

import os
import secrets
from pathlib import Path
from urllib.parse import quote

ENV_FILE = Path(".env.tasks")
FOLDER = Path("broker-local")
HOST_PORT = 6384  # the host side of the container's 6379; other labs use 6379/6380


def write_private(path: Path, text: str, mode: int) -> None:
    # os.open applies the mode at creation, so the secret is never readable by others,
    # not even for the moment between writing and a later chmod.  O_EXCL: never overwrite.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.chmod(path, mode)  # the umask may have removed bits we asked for


def main() -> None:
    if ENV_FILE.exists() or FOLDER.exists():
        raise SystemExit("local broker configuration exists; reuse it (nothing was changed)")

    password = secrets.token_urlsafe(24)
    in_url = quote(password, safe="")  # '/', '+', '@' or ':' would otherwise break the URL

    FOLDER.mkdir(mode=0o700)
    os.chmod(FOLDER, 0o700)
    write_private(ENV_FILE, (
        f"TASK_BROKER_PASSWORD={password}\n"
        f"CELERY_BROKER_URL=redis://:{in_url}@127.0.0.1:{HOST_PORT}/0\n"
        f"CELERY_RESULT_BACKEND=redis://:{in_url}@127.0.0.1:{HOST_PORT}/1\n"
    ), 0o600)
    # Read inside the container by the redis user, so 0644; the 0700 folder keeps other host users out.
    write_private(FOLDER / "redis.conf", (
        "bind 0.0.0.0\n"             # inside the container; the host publishes it on 127.0.0.1 only
        "protected-mode yes\n"
        "port 6379\n"
        f"requirepass {password}\n"
        "dir /data\n"
        "appendonly yes\n"           # keep queued messages across a restart ...
        "appendfsync everysec\n"     # ... losing at most about one second of writes
        "maxmemory 256mb\n"
        "maxmemory-policy noeviction\n"  # a full broker refuses writes instead of dropping messages
    ), 0o644)

    ignore = Path(".gitignore")
    present = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    missing = [rule for rule in (".env.tasks", "broker-local/") if rule not in present]
    if missing:
        with ignore.open("a", encoding="utf-8") as stream:
            stream.write("\n" + "\n".join(missing) + "\n")
    print("local broker files created; credentials were not printed")


if __name__ == "__main__":
    main()
