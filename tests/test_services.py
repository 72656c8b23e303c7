"""The service layer: real Redis and MariaDB/MySQL started by the kit, credentials kept private."""

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shared import credentials, servicectl
from shared import services as S
from shared.manifest import KIT_ROOT
from shared.services_clients import mysql_connect, redis_ok, redis_ping
from shared.services_docker import write_compose
from shared.services_native import NativeService, mysql_socket



def _servicectl(*args):
    return subprocess.run([sys.executable, "-m", "shared.servicectl", *args], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, LAB_LANG="en"))


def test_compose_files_agree_with_native_settings():
    assert write_compose(check=True) == 0, "run: python -m shared.servicectl compose"
    compose = (KIT_ROOT / "docker" / "compose.yaml").read_text()
    assert f"{S.HOST}:{S.REDIS_PORT}:6379" in compose and f"{S.HOST}:{S.MYSQL_PORT}:3306" in compose
    assert S.REDIS_IMAGE in compose and S.MYSQL_IMAGE in compose and "--default-time-zone=+00:00" in compose
    for key, value in S.REDIS_SETTINGS:
        assert f"--{key} {value}" in compose


def _up_holding(exclusive: bool):
    with servicectl.in_use(exclusive=exclusive):
        result = _servicectl("up")
        assert result.returncode == 0, result.stdout + result.stderr
        yield result


@pytest.fixture
def running():
    # Servers up and held (shared) for one test, so no drill elsewhere stops them meanwhile.  shop_lab (slot 0)
    # is no lesson run's (they use slots 4–7); the tests that rebuild or read it hold the servers alone.
    yield from _up_holding(exclusive=False)


@pytest.fixture
def running_alone():
    # For a test that stops a server, or rebuilds shop_lab (`servicectl reset`), which the monitor's test
    # reads: no other run may be using them meanwhile.
    yield from _up_holding(exclusive=True)


def test_up_is_ready_and_idempotent(running):
    again = _servicectl("up")
    assert again.returncode == 0 and "ready" in again.stdout
    assert "redis" in _servicectl("status").stdout


def test_credentials_private_and_never_printed(running_alone):
    mode = stat.S_IMODE(os.stat(S.ENV_FILE).st_mode)
    assert mode == 0o600, oct(mode)
    secret = credentials.ensure_credentials()
    outputs = [running_alone.stdout, running_alone.stderr]
    for args in (["status"], ["up"], ["reset"]):
        result = _servicectl(*args)
        outputs += [result.stdout, result.stderr]
    for log in S.SERVICES_DIR.rglob("*.log"):
        outputs.append(log.read_text(errors="replace"))
    for key in ("TASK_BROKER_PASSWORD", "MYSQL_PASSWORD", "MYSQL_ROOT_PASSWORD", *credentials.URL_KEYS):
        assert all(secret[key] not in text for text in outputs), key
    assert "DATABASE_URL=mysql+pymysql://app_user:" in S.ENV_FILE.read_text()
    assert "%2B%2F@" in S.ENV_FILE.read_text()  # the password is percent-encoded in the URLs


def test_redis_requires_the_password(running):
    secret = credentials.ensure_credentials()
    assert redis_ping(secret["TASK_BROKER_PASSWORD"])
    assert not redis_ping(None)
    assert not redis_ping("wrong-password")


def test_mysql_is_utc_has_products_and_no_passwordless_accounts(running_alone):
    assert _servicectl("reset").returncode == 0
    secret = credentials.ensure_credentials()
    conn = mysql_connect(S.DB_USER, secret["MYSQL_PASSWORD"], S.DATABASE)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@time_zone, COUNT(*), SUM(id > 30) FROM products")
            zone, count, bulk = cur.fetchone()
            assert zone in ("+00:00", "UTC") and count == S.SAMPLE_PRODUCTS and bulk > 0
    finally:
        conn.close()
    if S.mode() == "native":
        root = mysql_connect("root", secret["MYSQL_ROOT_PASSWORD"],
                             unix_socket=str(mysql_socket()))
        try:
            with root.cursor() as cur:
                cur.execute("SELECT user, host FROM mysql.user WHERE authentication_string = '' "
                            "AND user <> 'mariadb.sys'")
                assert cur.fetchall() == ()
        finally:
            root.close()


def test_port_held_by_someone_else_is_a_clear_error(tmp_path, monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        service = NativeService("redis", port)
        with pytest.raises(S.ServiceError, match=f"port {port} is held by another program"):
            monkeypatch.setenv("LAB_LANG", "en")
            service.check_port_free()


def test_bad_mode_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LAB_SERVICES", "cloud")
    monkeypatch.setenv("LAB_LANG", "en")
    with pytest.raises(S.ServiceError, match="docker, native or external"):
        S.mode()


def test_schema_files_applied_in_order_and_informational_lines_reported(running, tmp_path, monkeypatch):
    from checks.servers import prepare_services
    slot = int(os.environ.get("LAB_SLOT", "0"))
    (tmp_path / "schema_a.sql").write_text(
        "CREATE TABLE export_jobs (id CHAR(36) PRIMARY KEY, state VARCHAR(16) NOT NULL);\n"
        "SELECT @@no_such_variable_on_any_server;\n")
    (tmp_path / "schema_b.sql").write_text("ALTER TABLE export_jobs ADD COLUMN attempts INT NOT NULL DEFAULT 0;\n")
    lesson = {"id": "11", "services": ["redis", "mysql"]}
    notices = prepare_services(lesson, tmp_path, ["schema_a.sql", "schema_b.sql"])
    assert len(notices) == 1 and "schema_a.sql" in notices[0]["message"] and "no_such_variable" in notices[0]["message"]
    assert notices[0]["actionable"] is False  # only looks at the result: shown after the checks, nothing to do
    assert stat.S_IMODE(os.stat(tmp_path / ".env.tasks").st_mode) == 0o600
    secret = credentials.ensure_credentials()
    conn = mysql_connect(S.DB_USER, secret["MYSQL_PASSWORD"], S.slot_database(slot))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
                        "AND table_name = 'export_jobs'")
            assert cur.fetchone()[0] == 3
    finally:
        conn.close()
    (tmp_path / "schema_b.sql").write_text("ALTER TABLE no_such_table ADD COLUMN x INT;\n")
    with pytest.raises(Exception, match="no_such_table"):
        prepare_services(lesson, tmp_path, ["schema_a.sql", "schema_b.sql"])


def test_external_mode_uses_your_urls_and_writes_nothing(running, tmp_path, monkeypatch):
    secret = credentials.ensure_credentials()
    before = S.ENV_FILE.stat().st_mtime_ns
    env = dict(os.environ, LAB_SERVICES="external", LAB_LANG="en",
               **{key: secret[key] for key in credentials.URL_KEYS})
    for args in (["up"], ["status"]):
        result = subprocess.run([sys.executable, "-m", "shared.servicectl", *args], cwd=KIT_ROOT, capture_output=True,
                                text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert all(secret[key] not in result.stdout + result.stderr for key in credentials.URL_KEYS)
    assert "mode: external" in result.stdout and "ready" in result.stdout
    assert S.ENV_FILE.stat().st_mtime_ns == before
    monkeypatch.setenv("LAB_SERVICES", "external")
    monkeypatch.setenv("LAB_LANG", "en")
    with pytest.raises(S.ServiceError, match="LAB_SLOT"):
        servicectl.reset_database(S.DATABASE)
    for key in credentials.URL_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(S, "ENV_FILE", tmp_path / "missing.env")
    with pytest.raises(S.ServiceError, match="CELERY_BROKER_URL"):
        credentials.ensure_credentials()


def test_stop_service_for_drills_and_up_brings_it_back(running_alone, monkeypatch):
    secret = credentials.ensure_credentials()
    assert "stopped" in servicectl.stop_service("redis")
    assert not redis_ok(secret)
    servicectl.up(["redis"])
    assert redis_ok(secret)
    monkeypatch.setenv("LAB_SERVICES", "external")
    monkeypatch.setenv("LAB_LANG", "en")
    with pytest.raises(S.ServiceError, match="cannot stop"):
        servicectl.stop_service("redis")


def _we_wait_for(path) -> bool:
    """This process has a lock request on `path` that the kernel holds back (a `->` line in /proc/locks)."""
    inode = str(os.stat(path).st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and fields[5] == str(os.getpid()) \
                and fields[6].rsplit(":", 1)[-1] == inode:
            return True
    return False


def test_a_waiting_exclusive_run_goes_before_later_shared_runs(tmp_path, monkeypatch):
    import threading

    from shared.proc import wait_until
    # Lock files of this test's own: another worker's run holding or awaiting the real services (at their
    # turnstile) would make this test's exclusive run wait there, not where the test looks for it.
    monkeypatch.setattr(S, "SERVICES_DIR", tmp_path)
    order = []
    held, release = threading.Event(), threading.Event()

    def first_shared():
        with servicectl.in_use():
            order.append("first shared")
            held.set()
            release.wait(60)  # holds the services until the others are seen waiting

    def exclusive():
        with servicectl.in_use(exclusive=True):
            order.append("exclusive")

    def late_shared():
        with servicectl.in_use():
            order.append("late shared")

    holder = threading.Thread(target=first_shared)
    holder.start()
    assert held.wait(60)
    waiter = threading.Thread(target=exclusive)
    waiter.start()
    wait_until(lambda: _we_wait_for(S.SERVICES_DIR / "in-use.lock"), 10, "the exclusive run to wait for the services")
    late = threading.Thread(target=late_shared)
    late.start()
    wait_until(lambda: _we_wait_for(S.SERVICES_DIR / "turnstile.lock"), 10, "the late run to wait at the turnstile")
    release.set()
    for thread in (holder, waiter, late):
        thread.join(60)
    assert order == ["first shared", "exclusive", "late shared"]


def test_the_monitor_reads_through_an_account_that_can_only_select(running_alone):
    """make monitor's account: its numbers come back; any write is refused by the server itself."""
    import pymysql

    from checks import monitor
    # shop_lab is made by `reset` (or a lesson run on slot 0), never by `up`: this test makes its own rather
    # than count on another test having made it first (a fresh clone ran it before any did: Unknown database)
    assert _servicectl("reset").returncode == 0
    user, password = credentials.monitor_credentials()
    assert stat.S_IMODE(os.stat(credentials.MONITOR_ENV).st_mode) == 0o600
    db_connect, redis_connect = monitor.connectors()
    sample = monitor.collect(db_connect, redis_connect)
    assert "db" in sample and "redis" in sample, sample
    assert isinstance(sample["redis"]["queues"], dict)
    conn = mysql_connect(user, password, S.DATABASE)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM products")
            for statement in ("INSERT INTO products (id, name, description, price_cents) VALUES (999999, 'x', 'x', 1)",
                              "DELETE FROM products", "CREATE TABLE monitor_may_not (id INT)"):
                with pytest.raises(pymysql.err.OperationalError) as denied:
                    cur.execute(statement)
                assert denied.value.args[0] in (1142, 1044), denied.value  # command denied to user
    finally:
        conn.close()


def test_a_socket_nobody_listens_on_is_a_clear_error_and_leaves_no_socket_open(tmp_path):
    import gc
    import warnings

    import pymysql
    stale = tmp_path / "stale.sock"  # a socket file whose server is gone: connect() is refused
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(stale))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for path in (tmp_path / "missing.sock", stale):
            with pytest.raises(pymysql.err.OperationalError, match="through socket"):
                mysql_connect("root", "x", unix_socket=str(path), timeout=1)
        gc.collect()
    assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []


def test_native_redis_starts_in_a_folder_whose_path_has_a_space(tmp_path):
    """redis.conf's dir unquoted was 'wrong number of arguments' for a kit cloned into "My Projects"."""
    from shared.proc import Process, free_port
    from shared.services_native import find_binary
    if find_binary("redis-server") is None:
        pytest.skip("no redis-server (as root: apt-get install -y redis-server)")
    data, port = tmp_path / "My Projects" / "数据", free_port()
    data.mkdir(parents=True)
    conf = tmp_path / "redis.conf"
    conf.write_text("\n".join([*S.redis_conf_lines('p"w\\', str(data), port, "127.0.0.1"), "daemonize no",
                               'save ""']) + "\n")
    with Process([find_binary("redis-server"), str(conf)], cwd=tmp_path, log_path=tmp_path / "redis.log") as redis:
        redis.wait_ready(15, port=port)
        assert redis_ping('p"w\\', 2.0, "127.0.0.1", port)  # the password, quotes and all, as written


def test_the_mysql_socket_moves_to_a_private_folder_when_its_path_would_be_too_long(tmp_path, monkeypatch):
    """MariaDB refuses a socket path over 107 bytes ('The socket file path is too long'): a kit cloned deep
    in a home folder could not start its server."""
    from shared import services_native
    short = tmp_path / "mysql"
    monkeypatch.setattr(services_native.MYSQL, "dir", short)
    assert mysql_socket() == short / "mysqld.sock"
    deep = tmp_path / ("x" * 80) / "mysql"
    monkeypatch.setattr(services_native.MYSQL, "dir", deep)
    socket_path = mysql_socket()
    try:
        assert len(os.fsencode(socket_path)) <= services_native.SOCKET_PATH_MAX and socket_path.name == "mysqld.sock"
        assert stat.S_IMODE(os.lstat(socket_path.parent).st_mode) == 0o700 and mysql_socket() == socket_path
        socket_path.parent.chmod(0o755)  # a folder others may enter is never used
        with pytest.raises(S.ServiceError, match="not a private folder of yours"):
            mysql_socket()
    finally:
        services_native.forget_private_socket_folder()  # what `down` does once the server has stopped
    assert not socket_path.parent.exists()
