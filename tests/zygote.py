"""A pre-imported Python that forks the suite's Celery workers, beats and ASGI servers.

The suite starts ~150 of them, and each spent ~2 s of CPU importing the same libraries
(Django, Celery, kombu, redis, psycopg, channels, uvicorn) before it did anything: on the
machine's two cores, minutes of the run. One zygote per test process imports them once, with
no settings configured and no thread started, and forks each child from there. The child is
still a real process of its own: its own session and process group (kill -9 of the group
kills it and its pool processes, as with `subprocess.Popen(start_new_session=True)`), its own
environment and log file, and it runs the same `python -m celery ...` / `python -m uvicorn ...`
main as a fresh interpreter would, importing the project (settings, apps) itself.

Protocol, one JSON object a line: the test process writes {"argv", "env", "cwd", "log"} to the
zygote's stdin; the zygote answers {"pid"} (or {"error"}) on its stdout. Children are reaped
by the zygote (they are its children, not the test process's): `Forked` watches one through a
pidfd. Run `python -m tests.zygote` only through `spawn()`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import traceback

# What a Celery worker, a beat and uvicorn import before the project: safe to import before
# settings are configured, and none of them starts a thread or reads the environment as it
# loads (both would be wrong in a fork).
PRELOAD = (
    "django.db.models",
    "django.http",
    "django.urls",
    "django.forms",
    "django.template",
    "django.views.generic",
    "django.core.serializers.json",
    "django.contrib.auth.hashers",
    "celery.bin.celery",
    "celery.apps.worker",
    "celery.concurrency.solo",
    "celery.concurrency.prefork",
    "celery.beat",
    "kombu.transport.redis",
    "redis.asyncio",
    "psycopg",
    "psycopg_pool",
    "channels.layers",
    "channels_redis.core",
    "channels_redis.pubsub",
    "uvicorn.main",
    "pgvector.django",
    "httpx",
)
MODULES = ("celery", "uvicorn")  # `python -m <one of these>` is forked; anything else is not


def forkable(argv: list[str]) -> bool:
    return (
        len(argv) > 2
        and argv[0] == sys.executable
        and argv[1] == "-m"
        and argv[2] in MODULES
        and os.environ.get("AGENTSTATE_TEST_ZYGOTE", "1") != "0"
        and _pidfds()
    )


@functools.cache
def _pidfds() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+): how the test process watches a child
    that is not its own. Without them, children are started as fresh interpreters."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


# ------------------------------------------------------------------ the test process's side


class Forked:
    """The part of `subprocess.Popen` that tests/processes.py uses, for a zygote's child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it ended, and was reaped, before we looked
            self._fd = None
            self.returncode = -1

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            assert self._fd is not None
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            os.close(self._fd)
            self._fd = None
            self.returncode = -1  # the zygote reaps it: its status is in the log, not here
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                return self.wait(0)
            except subprocess.TimeoutExpired:
                return None
        return self.returncode


class _Zygote:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # tests start replacement workers from threads
        self.proc: subprocess.Popen | None = None

    def _started(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # a test's kill of a process group never reaches it
            )
        return self.proc

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> Forked:
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd, "log": log}) + "\n"
        with self.lock:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(request.encode())
            proc.stdin.flush()
            line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the test zygote exited")
        answer = json.loads(line)
        if "pid" not in answer:
            raise RuntimeError(f"the test zygote could not start {argv}: {answer}")
        return Forked(answer["pid"])


_zygote = _Zygote()


def spawn(argv: list[str], *, env: dict[str, str], cwd: str, log: str) -> Forked:
    """Start `argv` (a forkable `python -m celery|uvicorn ...`) as a child of the zygote."""
    return _zygote.spawn(argv, env, cwd, log)


# ------------------------------------------------------------------------ the zygote itself


def _child(request: dict) -> None:
    """In the forked child: become the process `argv` would have started, and never return."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        module = argv[2]
        sys.argv = [module, *argv[3:]]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _reap(signum, frame) -> None:  # noqa: ARG001
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        line = sys.stdin.buffer.readline()  # one request at a time: the test side waits
        if not line:
            return  # the test process is gone
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        os.write(1, (json.dumps({"pid": pid}) + "\n").encode())


if __name__ == "__main__":
    main()
