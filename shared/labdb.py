"""The kit's own view of a lesson's database, for verifiers: the URL from the work dir's .env.tasks
(the slot's schema), a UTC session, dict rows.  Never printed."""

from __future__ import annotations

import contextlib
from urllib.parse import unquote, urlsplit

from shared.celerylab import setting
from shared.i18n import t


def db_settings() -> dict:
    url = setting("DATABASE_URL")
    assert url, t("没有 DATABASE_URL（.env.tasks 由检查器写入工作目录）",
                  "DATABASE_URL is missing (the checker writes .env.tasks into the work dir)")
    parts = urlsplit(url)
    from shared.labctl import is_loopback
    return {"host": parts.hostname, "port": parts.port or 3306, "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""), "database": unquote(parts.path.lstrip("/")),
            "ssl_disabled": is_loopback(parts.hostname) or None}  # see labctl.is_loopback


@contextlib.contextmanager
def kit_db(autocommit: bool = True):
    import pymysql
    from pymysql.cursors import DictCursor
    conn = pymysql.connect(**db_settings(), charset="utf8mb4", cursorclass=DictCursor, autocommit=autocommit,
                           connect_timeout=3, read_timeout=10, write_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            yield cur
    finally:
        conn.close()


def sql(query: str, args=()) -> list[dict]:
    with kit_db() as cur:
        cur.execute(query, args)
        return list(cur.fetchall())
