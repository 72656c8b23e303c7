"""Start, check and stop the kit's Redis and MySQL-compatible servers, one start at a time, and hold them
while a lesson runs (the services lock).

    python -m shared.servicectl up|down|status|reset|compose [--check]

Modes (LAB_SERVICES=docker|native|external, else auto-detected: shared/services.py mode):
  docker    docker/compose.yaml (shared/services_docker.py)
  native    private redis-server and mariadbd processes under .state/services/ (shared/services_native.py)
  external  servers you run yourself, reached through the URLs in the environment or .env.tasks

Credentials are generated once into .env.tasks (mode 0600) and never printed (shared/credentials.py).
Lessons' verifiers use this module's names: up, stop_for_drill, split_sql, ensure_credentials, redis_ok,
MYSQL, ServiceError.
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
import time

from shared import services as S
from shared.credentials import ensure_credentials
from shared.i18n import t
from shared.proc import port_open, wait_until
from shared.services import ServiceError, mode
from shared.services_clients import app_connect, mysql_connect, mysql_ok, redis_ok
from shared.services_docker import compose, docker_up, write_compose
from shared.services_native import (MYSQL, REDIS, ensure_binaries, forget_private_socket_folder, mysql_socket,
                                     mysql_up, redis_up)


@contextlib.contextmanager
def starting():
    """One `up` (or a look at the ports) at a time: two runs starting the servers together would each
    start a copy, and one copy would end up holding the port without being in the pid file."""
    S.SERVICES_DIR.mkdir(parents=True, exist_ok=True)
    with open(S.SERVICES_DIR / "up.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def up(names: list[str] | None = None) -> str:
    """Make the named services (default: both) ready; idempotent.  Returns the mode used."""
    with starting():
        return _up(names)


def _up(names: list[str] | None) -> str:
    names = names or ["redis", "mysql"]
    current = mode()
    secret = ensure_credentials()
    if current == "docker":
        docker_up(secret, names)
    elif current == "native":
        ensure_binaries()
        if "redis" in names:
            redis_up(secret)
        if "mysql" in names:
            mysql_up(secret)
    probes = {"redis": lambda: redis_ok(secret, timeout=2), "mysql": lambda: mysql_ok(secret)}
    for name in names:
        if not probes[name]():
            raise ServiceError(t("{name} is not reachable (mode {current}). Run make doctor to see why", name=name,
                                 current=current))
    return current


def stop_service(name: str) -> str:
    """Stop one server for a drill (a lesson proving what survives it); `up` starts it again.

    Returns how it was stopped.  Servers you run yourself (external mode) are never touched."""
    current = mode()
    if current == "external":
        raise ServiceError(t("LAB_SERVICES=external: the checker cannot stop a {name} you run yourself; use native "
                             "or docker services", name=name))
    if current == "docker":
        result = compose("stop", name)
        if result.returncode != 0:
            raise ServiceError(f"docker compose stop {name} failed:\n" + result.stderr[-400:])
        how = f"docker compose stop {name}"
    else:
        service = {"redis": REDIS, "mysql": MYSQL}[name]
        pid = service.pid()
        service.stop()
        how = f"{name} pid {pid} stopped"
    port = S.REDIS_PORT if name == "redis" else S.MYSQL_PORT
    wait_until(lambda: not port_open(port), 20, f"{name} to stop listening", interval=0.1)
    return how


def stop_for_drill(name: str, restart: bool = False) -> str:
    """stop_service inside a lesson's check (with `restart`, `up` again right after): a server the checker may not
    stop or start (external mode) fails that check as unprovable.  Returns how it was stopped."""
    try:
        how = stop_service(name)
        if restart:
            up([name])
    except ServiceError as exc:  # external mode: a server the learner runs is never stopped
        raise AssertionError(t("this item cannot be proved: {exc}", exc=exc)) from None
    return how


def down() -> None:
    if mode() == "docker":
        compose("down")
        return
    for service in (REDIS, MYSQL):
        service.stop()
    forget_private_socket_folder()


def reset_database(database: str = S.DATABASE) -> None:
    """A fresh schema with the products sample rows; lessons add their own schema files after this."""
    secret = ensure_credentials()
    if mode() == "external":
        if database == S.DATABASE:  # servers you run yourself: never drop your own shop_lab
            raise ServiceError(t("in external mode the checks rebuild only shop_lab_<slot>: set LAB_SLOT=1..7"))
        conn = app_connect(secret)
    else:
        conn = mysql_connect("root", secret["MYSQL_ROOT_PASSWORD"], unix_socket=None) if mode() == "docker" else \
            mysql_connect("root", secret["MYSQL_ROOT_PASSWORD"], unix_socket=str(mysql_socket()))
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
            cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
            cur.execute(f"USE `{database}`")
            for statement in split_sql(S.products_sql()):
                cur.execute(statement)
    finally:
        conn.close()


def split_sql(script: str) -> list[str]:
    """Split a schema file on ';' at line ends (the lesson files keep one statement per block).  A leading
    BOM (some Windows editors write one) is dropped: MySQL would read it as part of the first statement."""
    statements, current = [], []
    for line in script.removeprefix("\ufeff").splitlines():
        if line.strip().startswith("--") and not current:
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            statement = "\n".join(current).strip().rstrip(";").strip()
            if statement:
                statements.append(statement)
            current = []
    tail = "\n".join(current).strip()
    if tail:
        statements.append(tail)
    return statements


@contextlib.contextmanager
def in_use(exclusive: bool = False):
    """Hold the services while a lesson runs: shared by ordinary runs, exclusive for a lesson that
    stops or restarts a server (so it never pulls Redis or MySQL away from a run in another slot).

    A turnstile gives a waiting exclusive run priority: it holds `turnstile.lock` while it waits, and
    every new shared run passes through the turnstile first.  Without it, a steady stream of shared
    runs (parallel tests) can keep the exclusive one waiting for minutes.
    """
    S.SERVICES_DIR.mkdir(parents=True, exist_ok=True)
    with open(S.SERVICES_DIR / "turnstile.lock", "a") as turnstile, \
            open(S.SERVICES_DIR / "in-use.lock", "a") as handle:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)  # through: only a waiting exclusive run holds it
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def status() -> list[str]:
    secret = ensure_credentials()
    lines = [f"mode: {mode()}"]
    checks = (("redis", REDIS, lambda: redis_ok(secret)), ("mysql", MYSQL, lambda: mysql_ok(secret)))
    for name, service, probe in checks:
        pid = service.pid()
        if probe():
            state = t("ready") + (f" (pid {pid})" if pid else "")
        elif pid:
            state = t("running (pid {pid}) but not answering", pid=pid)
        elif port_open(service.port):
            state = t("port {port} held by another program", port=service.port)
        else:
            state = t("stopped")
        lines.append(f"{name:<6} {S.HOST}:{service.port}  {state}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "status"
    try:
        if command == "up":
            started = time.monotonic()
            used = up(argv[1:] or None)
            print(t("services ready ({used}, {monotonic:.1f}s)", used=used, monotonic=time.monotonic() - started))
        elif command == "down":
            down()
            print(t("services stopped"))
        elif command == "status":
            print("\n".join(status()))
        elif command == "reset":
            up(["mysql"])
            reset_database()
            print(t("database {database} rebuilt", database=S.DATABASE))
        elif command == "compose":
            return write_compose(check="--check" in argv)
        else:
            print("usage: python -m shared.servicectl up|down|status|reset|compose [--check]", file=sys.stderr)
            return 2
    except ServiceError as exc:
        print(t("error: ") + str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
