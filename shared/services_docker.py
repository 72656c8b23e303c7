"""Docker mode: the kit's servers from docker/compose.yaml, and the docker files written from
shared/services.py (`python -m shared.servicectl compose`)."""

from __future__ import annotations

import subprocess

from shared import services as S
from shared.credentials import COMPOSE_ENV, create_monitor_account
from shared.i18n import t
from shared.manifest import KIT_ROOT
from shared.services import ServiceError
from shared.services_clients import mysql_connect


def compose(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "compose", "--env-file", str(COMPOSE_ENV), "-f",
                           str(KIT_ROOT / "docker" / "compose.yaml"), *args], capture_output=True, text=True)


def docker_up(secret: dict, names: list[str]) -> None:
    result = compose("up", "-d", "--wait", *names)
    if result.returncode != 0:
        raise ServiceError("docker compose up failed:\n" + result.stderr[-800:])
    if "mysql" in names:  # the monitor's read-only account: its password is generated, so not in init SQL
        conn = mysql_connect("root", secret["MYSQL_ROOT_PASSWORD"])
        try:
            with conn.cursor() as cur:
                create_monitor_account(cur)
        finally:
            conn.close()


def write_compose(check: bool) -> int:
    targets = {KIT_ROOT / "docker" / "compose.yaml": S.compose_yaml(),
               KIT_ROOT / "docker" / "init" / "00-grants.sql": S.GRANTS_SQL,
               KIT_ROOT / "docker" / "init" / "01-products.sql": S.products_sql()}
    stale = [path for path, text in targets.items() if not path.exists() or path.read_text() != text]
    if check:
        for path in stale:
            print(t("{path} differs from shared/services.py: run python -m shared.servicectl compose", path=path))
        return 1 if stale else 0
    for path, text in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0
