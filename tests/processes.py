"""Real processes for tests: the ASGI server, Celery workers and beat, on the test database.

Tests that use them must commit their data (`django_db(transaction=True)`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

from django.conf import settings
from django.db import connection

from tests import zygote

BASE_DIR = Path(__file__).resolve().parents[1]
# A session on servers of its own (AGENTSTATE_TEST_LOG_DIR set beside AGENTSTATE_VAR_DIR) keeps
# its logs apart too: child processes of two sessions must not write the same file.
LOG_DIR = Path(os.environ.get("AGENTSTATE_TEST_LOG_DIR") or BASE_DIR / "var" / "test-logs")
# As the session began: importing config.asgi (tests of the live layer do) sets it to "1" in
# this process, and children would inherit that, so whether a test's Celery workers ran on a
# connection pool depended on the tests that ran before it. Web children set it themselves.
_DB_POOL = os.environ.get("AGENTSTATE_DB_POOL")
TEST_RATE_LIMIT = "1000000/min"
# Every child process gets this key, so they derive the same demo payments secret.
CHILD_SECRET_KEY = "test-" + "x" * 45


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    return settings.DATABASE_URL.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]


def process_env(**extra: str) -> dict[str, str]:
    """The environment a child process needs to share this test session's servers."""
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": CHILD_SECRET_KEY,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1",
        # Servers and workers under test serve many quick calls of one key (tests/conftest.py).
        "API_RATE_LIMIT_READ": TEST_RATE_LIMIT,
        "API_RATE_LIMIT_WRITE": TEST_RATE_LIMIT,
        # Test servers come and go by the dozen: no model loaded unless a test searches.
        "MEMORY_WARM_QUERY_MODEL": "0",
        "WEB_PRELOAD_MCP": "0",  # an MCP test's server loads it at its first call
    }
    env.pop("AGENTSTATE_DB_POOL", None)
    if _DB_POOL is not None:
        env["AGENTSTATE_DB_POOL"] = _DB_POOL
    env.update(extra)
    return env


# Every child started in this test process, in order: a failed test's report ends with the
# logs of those it started (tests/conftest.py), which is all CI shows of them.
started: list[Proc] = []


class Proc:
    """A child process with its own process group and a log file under LOG_DIR."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        started.append(self)
        self.name = name
        self.log_path = LOG_DIR / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.popen: subprocess.Popen | zygote.Forked
        if zygote.forkable(argv):  # a Celery worker, beat or uvicorn: forked pre-imported
            self.popen = zygote.spawn(argv, env=env, cwd=str(BASE_DIR), log=str(self.log_path))
            return
        self.popen = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group: no cleanup, no acks, like a power cut."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def pause(self) -> None:
        """SIGSTOP the process group: alive but silent, like a long GC pause or a partition."""
        os.killpg(self.popen.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15) -> None:
        if self.alive():
            self.resume()  # a stopped process would not hear SIGTERM
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                self.kill9()
        self._log.close()

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


def start_asgi(name: str = "asgi", *, wait_path: str = "/login/", **env: str) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(
        name,
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
            "--no-access-log",
        ],
        # The demo on: it mounts the demo payment provider the refund runs call.
        process_env(**{"DEBUG": "1", "AGENTSTATE_DEMO": "1", **env}),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urlopen(url + wait_path, timeout=1)
            return proc, url
        except OSError:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{proc.log()[-3000:]}") from None
            time.sleep(0.1)


def start_worker(name: str, *, concurrency: int = 1, pool: str = "solo", **env: str) -> Proc:
    """A real Celery worker process (solo pool: the process we kill is the one stepping)."""
    proc = Proc(
        name,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--loglevel=INFO",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            f"--hostname={name}@%h",
            "--without-gossip",
            "--without-mingle",
        ],
        process_env(**env),
    )
    deadline = time.monotonic() + 30
    while "ready." not in proc.log():
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"worker {name} did not start:\n{proc.log()[-3000:]}")
        time.sleep(0.1)
    return proc


def start_beat(name: str = "beat", **env: str) -> Proc:
    schedule = LOG_DIR / f"{name}-schedule"
    return Proc(
        name,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "beat",
            "--loglevel=INFO",
            "--scheduler",
            "config.beat:LeaderPersistentScheduler",
            "-s",
            str(schedule),
        ],
        process_env(**env),
    )


def wait_until(check, *, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
