"""Reaching the kit's servers: one real round trip to Redis, MySQL connections (app_user's wherever the URLs
point, root's through the socket), and whether each answers."""

from __future__ import annotations

import socket

from shared import services as S


def redis_ping(password: str | None, timeout: float = 1.0, host: str = S.HOST, port: int = S.REDIS_PORT) -> bool:
    """One real round trip; False when unreachable or refused."""
    import redis
    client = redis.Redis(host=host, port=int(port), password=password, socket_connect_timeout=timeout,
                         socket_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.AuthenticationError,
            redis.exceptions.ResponseError):
        return False
    finally:
        client.close()


def mysql_connect(user: str, password: str, database: str | None = None, unix_socket: str | None = None,
                  timeout: float = 2.0, host: str = S.HOST, port: int = S.MYSQL_PORT):
    import pymysql
    if unix_socket:
        # PyMySQL leaves its own AF_UNIX socket open when connect() to a missing or not yet listening socket
        # fails (a ResourceWarning, an fd until the next GC): connect it here, where a failure closes it.
        # (This path is native mode's MariaDB, whose root signs in with mysql_native_password.)
        conn = pymysql.connect(unix_socket=unix_socket, user=user, password=password, database=database,
                               connect_timeout=timeout, autocommit=True, ssl_disabled=True, defer_connect=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(unix_socket)
        except OSError as exc:
            sock.close()
            raise pymysql.err.OperationalError(2002, f"Can't connect to the server through socket {unix_socket!r} "
                                                     f"({exc})") from exc
        conn.connect(sock)  # a failed handshake closes the socket it was given
        return conn
    return pymysql.connect(host=host, port=int(port), user=user, password=password, database=database,
                           connect_timeout=timeout, autocommit=True, ssl_disabled=is_loopback(host) or None)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str | None) -> bool:
    """PyMySQL ≥ 1.2 tries TLS by default and builds a fresh TLS context for every connection (~35 ms
    of CPU).  The kit's own servers listen on loopback without TLS, so the kit skips that there; a
    server elsewhere (external mode) keeps PyMySQL's default."""
    return host in LOOPBACK


def app_connect(secret: dict[str, str], database: str | None = None):
    """app_user's connection, wherever the URLs point."""
    return mysql_connect(secret["MYSQL_USER"], secret["MYSQL_PASSWORD"], database,
                         host=secret["MYSQL_HOST"], port=secret["MYSQL_PORT"])


def redis_ok(secret: dict[str, str], timeout: float = 1.0) -> bool:
    return redis_ping(secret["TASK_BROKER_PASSWORD"], timeout, secret["REDIS_HOST"], secret["REDIS_PORT"])


def mysql_ok(secret: dict[str, str]) -> bool:
    return mysql_ready(secret["MYSQL_USER"], secret["MYSQL_PASSWORD"], secret["MYSQL_HOST"], secret["MYSQL_PORT"])


def mysql_ready(user: str, password: str, host: str = S.HOST, port: int = S.MYSQL_PORT) -> bool:
    """The server answers SELECT 1 for this account within a second."""
    import pymysql
    try:
        conn = mysql_connect(user, password, timeout=1, host=host, port=port)
    except pymysql.err.MySQLError:
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        return True
    finally:
        conn.close()
