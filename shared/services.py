"""The one source of the kit's services' settings, and which mode runs them (LAB_SERVICES).

servicectl's native mode and docker/compose.yaml (plus its init SQL) are both made
from these values; tests/test_services.py keeps the committed docker files equal
to what `python -m shared.servicectl compose` generates.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from shared.i18n import t
from shared.manifest import KIT_ROOT
from shared.state import state_root

HOST = "127.0.0.1"
REDIS_PORT = 6384
MYSQL_PORT = 3307
DATABASE = "shop_lab"
DB_USER = "app_user"
REDIS_IMAGE = "redis:7"
MYSQL_IMAGE = "mysql:8.4"

# Durability and memory policy of the broker (lesson 08): keep every message, never evict one.
REDIS_SETTINGS = [
    ("appendonly", "yes"),
    ("appendfsync", "everysec"),
    ("maxmemory", "256mb"),
    ("maxmemory-policy", "noeviction"),
]

# Inside a box (checks/box.py) the servers are the box's own: TASKLAB_PRIVATE_SERVICES names the box-private
# folder that holds them and their credentials; the kit's own files are not even visible there.
_PRIVATE = os.environ.get("TASKLAB_PRIVATE_SERVICES")
ENV_FILE = Path(_PRIVATE) / ".env.tasks" if _PRIVATE else KIT_ROOT / ".env.tasks"  # URLs with the app passwords
SERVICES_DIR = Path(_PRIVATE) / "services" if _PRIVATE else state_root() / "services"  # data, pids, logs
SAMPLE_PRODUCTS = 60                          # > 30, so both the fast (≤ 30) and bulk queues have work

# Isolation slots: runs in different slots (parallel test workers, two terminals) never share a
# Redis database or a MySQL schema.  Slot 0 is what learners see: db 0/1 and shop_lab.
MAX_SLOTS = 8


class ServiceError(Exception):
    """A service could not be started or reached; the message says what to do."""


def mode() -> str:
    """docker, native or external: LAB_SERVICES, else docker when a docker daemon answers, else native.

      docker    docker/compose.yaml: redis:7 and mysql:8.4 on 127.0.0.1:6384/3307
      native    private redis-server and mariadbd processes under .state/services/ (shared/services_native.py)
      external  servers you run yourself, reached through the URLs in the environment or .env.tasks
    """
    chosen = os.environ.get("LAB_SERVICES", "").strip().lower()
    if chosen:
        if chosen not in ("docker", "native", "external"):
            raise ServiceError(t("LAB_SERVICES={chosen} is not valid: use docker, native or external", chosen=chosen))
        return chosen
    docker = shutil.which("docker")
    if docker:
        try:
            if subprocess.run([docker, "info"], capture_output=True, timeout=5).returncode == 0:
                return "docker"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "native"


def slot_database(slot: int) -> str:
    return DATABASE if slot == 0 else f"{DATABASE}_{slot}"


def slot_env(env_text: str, slot: int) -> str:
    """.env.tasks as a run in `slot` sees it: broker db 2·slot, results 2·slot+1, its own schema."""
    if slot == 0:
        return env_text
    lines = []
    for line in env_text.splitlines():
        key, _, value = line.partition("=")
        if key == "CELERY_BROKER_URL":
            value = value.rsplit("/", 1)[0] + f"/{2 * slot}"
        elif key == "CELERY_RESULT_BACKEND":
            value = value.rsplit("/", 1)[0] + f"/{2 * slot + 1}"
        elif key == "DATABASE_URL":
            value = value.rsplit("/", 1)[0] + f"/{slot_database(slot)}"
        lines.append(f"{key}={value}" if _ else line)
    return "\n".join(lines) + "\n"


DATABASE_PATTERN = DATABASE.replace("_", "\\_") + "%"  # a GRANT pattern: shop_lab, shop_lab_1, …

GRANTS_SQL = f"""\
-- app_user may use shop_lab and the per-slot copies shop_lab_1 … (parallel runs never share one).
GRANT ALL PRIVILEGES ON `{DATABASE_PATTERN}`.* TO '{DB_USER}'@'%';
GRANT PROCESS ON *.* TO '{DB_USER}'@'%';
"""

PRODUCTS_DDL = """\
CREATE TABLE IF NOT EXISTS products (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  name VARCHAR(120) NOT NULL,
  description VARCHAR(1000) NOT NULL,
  is_active TINYINT(1) NOT NULL DEFAULT 1,
  price_cents INT UNSIGNED NOT NULL,
  version INT UNSIGNED NOT NULL DEFAULT 1,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
"""


def products_sql() -> str:
    """The products table and its sample rows, as one SQL script (UTC session)."""
    rows = []
    for n in range(1, SAMPLE_PRODUCTS + 1):
        active = 0 if n % 10 == 0 else 1
        rows.append(f"  ({n}, 'product-{n:03d}', 'sample product {n} for export drills', {active}, {n * 125})")
    return ("SET time_zone = '+00:00';\n" + PRODUCTS_DDL +
            "INSERT INTO products (id, name, description, is_active, price_cents) VALUES\n" +
            ",\n".join(rows) + ";\n")


def redis_conf_lines(password: str, data_dir: str, port: int, bind: str) -> list[str]:
    """redis.conf for a native server.  The password and the folder are quoted as redis.conf reads a quoted
    argument (a kit cloned into "My Projects" has a space in its data folder)."""
    return [f"bind {bind}", "protected-mode yes", f"port {port}", f"requirepass {_redis_quoted(password)}",
            f"dir {_redis_quoted(data_dir)}", *(f"{key} {value}" for key, value in REDIS_SETTINGS)]


def _redis_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def compose_yaml() -> str:
    """docker/compose.yaml: the same ports, database, user, time zone and Redis policy as native mode."""
    redis_args = " ".join(f"--{key} {value}" for key, value in REDIS_SETTINGS)
    return f"""\
# Generated by `python -m shared.servicectl compose` from shared/services.py — edit that file, not this one.
# servicectl runs: docker compose --env-file .state/services/compose.env -f docker/compose.yaml up -d
name: task-lab
services:
  redis:
    image: {REDIS_IMAGE}
    command: redis-server --requirepass "${{TASK_BROKER_PASSWORD}}" {redis_args}
    ports: ["{HOST}:{REDIS_PORT}:6379"]
    volumes: ["redis-data:/data"]
    healthcheck:
      test: ["CMD-SHELL", "redis-cli -a \\"$$TASK_BROKER_PASSWORD\\" --no-auth-warning ping | grep -q PONG"]
      interval: 2s
      timeout: 2s
      retries: 15
    environment:
      TASK_BROKER_PASSWORD: ${{TASK_BROKER_PASSWORD}}
  mysql:
    image: {MYSQL_IMAGE}
    # UTC sessions; app_user may create triggers with the binary log on (lesson 12's fault injection).
    command: ["--default-time-zone=+00:00", "--log-bin-trust-function-creators=1"]
    ports: ["{HOST}:{MYSQL_PORT}:3306"]
    environment:
      MYSQL_DATABASE: {DATABASE}
      MYSQL_USER: {DB_USER}
      MYSQL_PASSWORD: ${{MYSQL_PASSWORD}}
      MYSQL_ROOT_PASSWORD: ${{MYSQL_ROOT_PASSWORD}}
      TZ: UTC
    volumes:
      - mysql-data:/var/lib/mysql
      - ./init:/docker-entrypoint-initdb.d:ro
    healthcheck:
      test: ["CMD-SHELL", "mysqladmin ping -h 127.0.0.1 -uroot -p\\"$$MYSQL_ROOT_PASSWORD\\" --silent"]
      interval: 2s
      timeout: 3s
      retries: 30
volumes:
  redis-data:
  mysql-data:
"""
