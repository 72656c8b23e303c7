"""Native mode: the kit's own redis-server and mariadbd, private processes under .state/services/ (same ports
as docker mode, own data dirs, pid files and logs), installed as root when missing, started, bootstrapped
with the kit's accounts, and stopped by PID."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

from shared import services as S
from shared.credentials import create_monitor_account, write_private
from shared.i18n import t
from shared.proc import is_zombie, port_open, wait_until
from shared.services import ServiceError
from shared.services_clients import mysql_connect, mysql_ready, redis_ping

TEMPLATE_LOG_FILE_SIZE = "8M"  # a box's MariaDB: small redo log, quick to copy and start
SEARCH_PATH = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/usr/local/sbin:/usr/bin"


def find_binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name, path=SEARCH_PATH)
        if found:
            return found
    return None


def _install_hint() -> str:
    return "sudo apt-get install -y redis-server mariadb-server"


def ensure_binaries() -> None:
    """Install Debian's servers when missing and we are root; otherwise say the command that would."""
    if find_binary("redis-server") and find_binary("mariadbd") and find_binary("mariadb-install-db"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(t("redis-server or MariaDB is missing. Run: {install_hint}", install_hint=_install_hint()))
    print(t("installing redis-server and mariadb-server (about 15–40 s) …"), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "redis-server", "mariadb-server"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(t("apt-get install failed:\n") + result.stderr[-800:])


_DETACHED: list[subprocess.Popen] = []


class NativeService:
    def __init__(self, name: str, port: int):
        self.name, self.port = name, port
        self.dir = S.SERVICES_DIR / name
        self.pid_file = S.SERVICES_DIR / f"{name}.pid"
        self.log_file = self.dir / f"{name}.log"

    def pid(self) -> int | None:
        """Our process's pid, if it is alive and really ours: it works inside our folder.

        (Servers rewrite their command line, so the working directory is the reliable mark;
        a recycled pid of some other program fails this test.)"""
        try:
            pid = int(self.pid_file.read_text().strip())
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except (OSError, ValueError):
            return None
        return pid if cwd.startswith(str(self.dir)) and not is_zombie(pid) else None

    def start(self, argv: list[str]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")
        # The kit's servers outlive the run that started them: without the run's mark (see
        # checks.sandbox.RUN_MARK) the runner's clean-up after that run never takes them for leftovers.
        env = {k: v for k, v in os.environ.items() if k != "TASKLAB_RUN_ID"}
        proc = subprocess.Popen(argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        log.close()
        _DETACHED.append(proc)  # the server outlives us; holding the handle keeps Popen from warning about it
        self.pid_file.write_text(f"{proc.pid}\n")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def check_port_free(self) -> None:
        if port_open(self.port):
            raise ServiceError(t("port {port} is held by another program (not the kit's {name}). See: ss -ltnp | "
                                 "grep :{port}; stop it, or use it with LAB_SERVICES=external", port=self.port,
                                 name=self.name))

    def stop(self, grace: float = 20) -> bool:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        try:
            wait_until(lambda: self.pid() is None or not Path(f"/proc/{pid}").exists() or is_zombie(pid), grace,
                       f"{self.name} to stop")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def wait_ready(self, probe, timeout: float) -> None:
        def ready():
            if self.pid() is None:
                raise ServiceError(t("{name} exited during start-up:\n", name=self.name) + self.log_tail())
            return probe()
        try:
            wait_until(ready, timeout, f"{self.name} on {S.HOST}:{self.port}", interval=0.1)
        except AssertionError:
            raise ServiceError(t("{name} not ready within {timeout:g}s:\n", name=self.name, timeout=timeout)
                               + self.log_tail()) from None


REDIS = NativeService("redis", S.REDIS_PORT)
MYSQL = NativeService("mysql", S.MYSQL_PORT)


def redis_up(secret: dict) -> None:
    if REDIS.pid() is not None and redis_ping(secret["TASK_BROKER_PASSWORD"]):
        return
    REDIS.stop()
    REDIS.check_port_free()
    data = REDIS.dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    conf = REDIS.dir / "redis.conf"
    lines = S.redis_conf_lines(secret["TASK_BROKER_PASSWORD"], str(data), S.REDIS_PORT, S.HOST)
    write_private(conf, "\n".join([*lines, "daemonize no", "save \"\""]) + "\n")
    REDIS.start([find_binary("redis-server"), str(conf)])
    REDIS.wait_ready(lambda: redis_ping(secret["TASK_BROKER_PASSWORD"]), 10)


SOCKET_PATH_MAX = 107  # bytes a unix socket's path may hold (sun_path is 108, with its final NUL)


def mysql_socket() -> Path:
    """Where the kit's MariaDB takes root's connections: a unix socket beside its data, unless that path is
    longer than a socket's path may be (a kit cloned deep in a home folder: MariaDB refuses to start) --
    then in a folder of this user's own under /tmp, named after the server's folder."""
    beside = MYSQL.dir / "mysqld.sock"
    if len(os.fsencode(beside)) <= SOCKET_PATH_MAX:
        return beside
    folder = _private_socket_folder()
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = os.lstat(folder)  # made by someone else, or a link: never used
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ServiceError(t("{folder} is not a private folder of yours (it holds the database server's socket): "
                             "remove it, then start again", folder=folder))
    return folder / "mysqld.sock"


def _private_socket_folder() -> Path:
    return Path("/tmp") / f"tasklab-{os.getuid()}-{hashlib.sha256(os.fsencode(MYSQL.dir)).hexdigest()[:12]}"


def forget_private_socket_folder() -> None:
    """Once the server has stopped: remove mysql_socket()'s folder under /tmp, if it made one and it is empty."""
    with contextlib.suppress(OSError):
        _private_socket_folder().rmdir()


def _mysql_argv() -> list[str]:
    argv = [find_binary("mariadbd"), "--no-defaults", f"--datadir={MYSQL.dir / 'data'}", f"--port={S.MYSQL_PORT}",
            f"--bind-address={S.HOST}", f"--socket={mysql_socket()}",
            f"--pid-file={MYSQL.dir / 'mysqld.pid'}",
            "--default-time-zone=+00:00", "--skip-name-resolve", "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci", "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2", f"--log-error={MYSQL.log_file}"]
    if os.geteuid() == 0:
        argv.append("--user=root")  # mariadbd refuses to run as root unless told to
    if os.environ.get("TASKLAB_MARIADB_TEMPLATE"):
        argv.append(f"--innodb-log-file-size={TEMPLATE_LOG_FILE_SIZE}")  # as the template was made
    return argv


def _mysql_bootstrap(secret: dict) -> None:
    """First start only: root gets a password, every password-less account goes, app_user is created."""
    socket = str(mysql_socket())
    conn = mysql_connect("root", "", unix_socket=socket)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT user, host FROM mysql.user")
            for user, host in cur.fetchall():
                if (user, host) != ("root", "localhost") and user != "mariadb.sys":
                    cur.execute("DROP USER %s@%s", (user, host))
            cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (secret["MYSQL_ROOT_PASSWORD"],))
            for host in (S.HOST, "localhost"):
                cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s",
                            (S.DB_USER, host, secret["MYSQL_PASSWORD"]))
            cur.execute("FLUSH PRIVILEGES")
    finally:
        conn.close()
    _grant(secret)
    (MYSQL.dir / "bootstrapped").write_text("yes\n")


def _grant(secret: dict) -> None:
    """app_user's rights, applied on every start so an older data dir gets new grants too."""
    conn = mysql_connect("root", secret["MYSQL_ROOT_PASSWORD"], unix_socket=str(mysql_socket()))
    try:
        with conn.cursor() as cur:
            for host in (S.HOST, "localhost"):
                pattern = S.DATABASE_PATTERN.replace("%", "%%")  # PyMySQL formats the query with %
                cur.execute(f"GRANT ALL PRIVILEGES ON `{pattern}`.* TO %s@%s", (S.DB_USER, host))
                # Lesson 11 reads innodb_trx to prove no transaction is held while a file is written.
                cur.execute("GRANT PROCESS ON *.* TO %s@%s", (S.DB_USER, host))
            create_monitor_account(cur)
    finally:
        conn.close()


def mysql_up(secret: dict) -> None:
    ready = lambda: mysql_ready(S.DB_USER, secret["MYSQL_PASSWORD"])  # noqa: E731
    if MYSQL.pid() is not None and ready():
        _grant(secret)  # cheap, and keeps a data dir made by an older kit up to date
        return
    MYSQL.stop()
    MYSQL.check_port_free()
    data = MYSQL.dir / "data"
    template = os.environ.get("TASKLAB_MARIADB_TEMPLATE")
    if not (MYSQL.dir / "bootstrapped").exists() and template:
        # A box's private server: a copy of a data dir made once by mariadb-install-db (checks/box.py)
        # starts in a fraction of a second; the bootstrap below gives it this box's own passwords.
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(template, data)
        MYSQL.start(_mysql_argv())
        MYSQL.wait_ready(lambda: mysql_socket().exists() and _root_socket_ok(""), 30)
        _mysql_bootstrap(secret)
    elif not (MYSQL.dir / "bootstrapped").exists():
        shutil.rmtree(data, ignore_errors=True)
        install_db(data)
        MYSQL.start(_mysql_argv())
        MYSQL.wait_ready(lambda: mysql_socket().exists() and _root_socket_ok(""), 30)
        _mysql_bootstrap(secret)
    else:
        MYSQL.start(_mysql_argv())
        MYSQL.wait_ready(lambda: _root_socket_ok(secret["MYSQL_ROOT_PASSWORD"]), 30)
        _grant(secret)
    MYSQL.wait_ready(ready, 30)


def install_db(datadir: Path, *options: str) -> None:
    """A new MariaDB data dir at `datadir` (not there yet), root without a password, through the socket only.
    mariadb-install-db is a shell script that hands its paths to chown and others unquoted, so a path with
    a space (a kit cloned into "My Projects") breaks it: the data dir is made in a fresh folder of the
    system's temp dir, then moved into place.  Its temporary tables go to a folder of its own: two
    bootstraps sharing /tmp removed each other's (ERROR 1051 Unknown table 'mysql.tmp_user_sys')."""
    work = Path(tempfile.mkdtemp(prefix="tasklab-install-db-"))
    try:
        (work / "tmp").mkdir()
        argv = [find_binary("mariadb-install-db"), "--no-defaults", f"--datadir={work / 'data'}",
                f"--tmpdir={work / 'tmp'}", "--auth-root-authentication-method=normal", "--skip-test-db", *options]
        if os.geteuid() == 0:
            argv.append("--user=root")
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError("mariadb-install-db failed:\n" + result.stdout[-600:] + result.stderr[-600:])
        datadir.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.move(work / "data", datadir)
        except OSError as exc:  # e.g. a full disk; shutil.Error lists every file that failed: the first says why
            shutil.rmtree(datadir, ignore_errors=True)
            why = exc.args[0][0][2] if isinstance(exc, shutil.Error) and exc.args and exc.args[0] else exc
            raise ServiceError(t("the new database could not be moved into {datadir}: {why}", datadir=datadir,
                                 why=why)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _root_socket_ok(password: str) -> bool:
    import pymysql
    try:
        mysql_connect("root", password, unix_socket=str(mysql_socket()), timeout=1).close()
        return True
    except pymysql.err.MySQLError:
        return False
