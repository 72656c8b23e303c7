"""Reaching the kit's servers: one real round trip to Redis, MySQL connections (app_user's wherever the URLs
point, root's through the socket), and whether each answers."""

from __future__ import annotations

import socket

from shared import services as S


def redis_ping(password: str | None, timeout: float = 1.0, host: str = S.HOST, port: int = S.REDIS_PORT) -> bool:
    """One real round trip (AUTH when there is a password, then PING); False when unreachable or refused.

    Spoken in Redis's own protocol rather than through redis-py: a box's inbox asks this before any check
    runs, and importing the client there cost 0.1 CPU-s in every box."""
    commands = ([["AUTH", password]] if password is not None else []) + [["PING"]]
    wire = b"".join(_resp(command) for command in commands)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(wire)
            data = b""
            while data.count(b"\r\n") < len(commands):  # each reply here is one line: +OK, +PONG or -ERR …
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                data += chunk
    except OSError:
        return False
    replies = data.split(b"\r\n")[:len(commands)]
    return replies[-1] == b"+PONG" and all(reply == b"+OK" for reply in replies[:-1])


def _resp(words: list[str]) -> bytes:
    """One command as Redis's protocol writes it: an array of bulk strings."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        raw = word.encode()
        parts += [f"${len(raw)}\r\n".encode(), raw, b"\r\n"]
    return b"".join(parts)


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
