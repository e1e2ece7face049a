"""Shared plumbing of the engine benchmarks: Django on the embedded servers, scratch
databases, server-side counters, libpq protocol traces and real Celery worker processes.

Nothing here changes a server setting: fsync, synchronous_commit and full_page_writes stay
as the embedded PostgreSQL has them (on).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

LOG_DIR = BASE_DIR / "var" / "bench-logs"
AGENT_MODULES = "agents.demo.refund_desk,bench._noop_agent"


# --------------------------------------------------------------------------- Django


def setup_django() -> None:
    """Django on the embedded servers (DATABASE_URL / REDIS_URL ignored on purpose)."""
    from config import embedded

    os.environ.update(embedded.service_env({}))
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["AGENTSTATE_AGENT_MODULES"] = AGENT_MODULES
    import django

    django.setup()
    from django.core.management import call_command

    # As `make run` does at every launch: a fresh ./var has no tables yet.
    call_command("migrate", verbosity=0, interactive=False)
    import bench._noop_agent  # noqa: F401  (registers the no-op agents)


def server_settings() -> dict[str, str]:
    with super_connect("postgres") as conn:
        names = (
            "server_version",
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_sync_method",
            "commit_delay",
        )
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


def assert_durable() -> dict[str, str]:
    found = server_settings()
    for name in ("fsync", "synchronous_commit", "full_page_writes"):
        if found[name] != "on":
            raise SystemExit(f"refusing to benchmark: {name} = {found[name]} (must stay on)")
    return found


# --------------------------------------------------------------------------- PostgreSQL


def pg_info():
    from config import embedded

    embedded.ensure_postgres()
    info = embedded._pg_info()
    assert info is not None
    return info


def _server_pids() -> list[int]:
    """The embedded PostgreSQL's postmaster with every process it started, and Redis."""
    from config import embedded

    with super_connect("postgres") as conn:  # its backend's parent, while it is alive
        postmaster = _ppid(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != postmaster:
            with contextlib.suppress(OSError, ValueError):
                if _ppid(int(entry.name)) == postmaster:
                    pids.append(int(entry.name))
    redis_root, _ = embedded._redis_paths()
    redis_pid = embedded._read_pid(redis_root / "redis.pid")
    return pids + ([redis_pid] if redis_pid else [])


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def place_apart(*, together: bool = False) -> str:
    """Run this process (and the workers it starts) on one half of the CPUs and the
    embedded PostgreSQL and Redis on the other, as a client and a database server on
    machines of their own. On a small machine, where the scheduler puts a client and its
    backend decides more than the code does: on 2 cores, the same run measured 0.43 ms/step
    with the two on different cores and 0.75 ms/step on the same one (see bench/README.md).
    The servers get every CPU back when this process exits. together=True puts all of them
    on the first half instead (a client that shares its cores with the database)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    half = len(cpus) // 2
    client, server = set(cpus[:half]), set(cpus[half:])
    if together:
        server = client
    try:
        pids = _server_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(pid, server)
    except (OSError, PermissionError) as exc:
        return f"not pinned ({type(exc).__name__}: {exc})"

    def restore() -> None:
        for pid in _server_pids():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, set(cpus))

    atexit.register(restore)
    for task in Path("/proc/self/task").iterdir():  # every thread already running, too
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), client)
    return f"client on CPU {_cpus(client)}, PostgreSQL and Redis on CPU {_cpus(server)}"


def _cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def super_url(database: str) -> str:
    return pg_info().super_url.rsplit("/", 1)[0] + f"/{database}"


def super_connect(database: str, **kwargs: Any):
    import psycopg

    return psycopg.connect(super_url(database), autocommit=True, **kwargs)


def ensure_database(name: str) -> str:
    """Create a scratch database owned by the superuser (once); return its URL."""
    with super_connect("postgres") as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return super_url(name)


class Monitor:
    """Cluster-wide counters read from a side connection: assigned xids (= transactions
    that wrote, each of which must flush WAL to commit) and WAL bytes."""

    def __init__(self) -> None:
        self.conn = super_connect("postgres")

    def lsn(self) -> str:
        return self.conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]

    def snapshot(self) -> tuple[int, int]:
        xid, lsn = self.conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
        ).fetchone()
        return int(xid), int(lsn)

    @staticmethod
    def delta(before: tuple[int, int], after: tuple[int, int]) -> dict[str, int]:
        return {"write_xacts": after[0] - before[0], "wal_bytes": after[1] - before[1]}

    def close(self) -> None:
        self.conn.close()


def wal_records(start_lsn: str, end_lsn: str) -> dict[str, int]:
    """WAL record counts by type between two LSNs (pg_waldump --stats=record), e.g.
    {"Btree/INSERT_LEAF": 300, "Heap/LOCK": 40, ...}; empty if pg_waldump cannot read it."""
    from config.embedded import _pg_bin, var_dir

    pg_wal = var_dir() / "postgres" / "pg_wal"
    done = subprocess.run(
        [
            str(_pg_bin() / "pg_waldump"),
            "-p",
            str(pg_wal),
            "-s",
            start_lsn,
            "-e",
            end_lsn,
            "--stats=record",
        ],
        capture_output=True,
        text=True,
    )
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) > 2 and "/" in parts[0] and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def btree_inserts(records: dict[str, int]) -> int:
    return sum(n for k, n in records.items() if k.startswith("Btree/INSERT"))


# --------------------------------------------------------------------------- protocol trace


@dataclass
class TraceCounts:
    round_trips: int = 0  # client sent, then waited for an answer
    statements: int = 0  # CommandComplete messages, BEGIN/COMMIT included
    commits: int = 0  # explicit COMMITs (autocommit statements commit implicitly)

    def __add__(self, other: TraceCounts) -> TraceCounts:
        return TraceCounts(
            self.round_trips + other.round_trips,
            self.statements + other.statements,
            self.commits + other.commits,
        )


@dataclass
class ProtocolTrace:
    """libpq's PQtrace on psycopg connections: counts round trips and statements exactly,
    whatever library sits on top (Django, LangGraph, SQLAlchemy)."""

    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-trace-")))
    _traced: list[tuple[Any, Path]] = field(default_factory=list)

    def attach(self, pgconn: Any) -> None:
        if any(p is pgconn for p, _ in self._traced):
            return
        import psycopg

        path = self.dir / f"{len(self._traced)}.trace"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        pgconn.trace(fd)  # libpq owns fd from here on and closes it in untrace()
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        self._traced.append((pgconn, path))

    def detach(self) -> TraceCounts:
        total = TraceCounts()
        for pgconn, path in self._traced:
            with contextlib.suppress(Exception):
                pgconn.untrace()
            total = total + _parse_trace(path.read_text(errors="replace"))
            path.unlink()
        self._traced.clear()
        return total


def _parse_trace(text: str) -> TraceCounts:
    counts = TraceCounts()
    last = ""
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        who, message = parts[0], " ".join(parts[2:]).strip()
        if who == "B" and last == "F":
            counts.round_trips += 1
        if who == "B" and message.startswith("CommandComplete"):
            counts.statements += 1
            if '"COMMIT"' in message:
                counts.commits += 1
        if who in ("F", "B"):
            last = who
    return counts


# --------------------------------------------------------------------------- CPU accounting

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields after "(comm)", state = index 0


def _cpu_s(pid: int, *, children_reaped: bool = False) -> float:
    fields = _stat(pid)
    if fields is None:
        return 0.0
    total = int(fields[11]) + int(fields[12])  # utime + stime
    if children_reaped:
        total += int(fields[13]) + int(fields[14])  # cutime + cstime of reaped children
    return total / _TICK


def wait_settled(pids: list[int], *, most: float = 180.0) -> float:
    """Seconds until these processes are idle (under a tenth of a core over a second): a web
    process loads the embedding model in the background when it starts, a one-off that would
    take the CPU a measurement needs on 2 cores (its cost is bench/boot.py's)."""
    started = time.monotonic()
    before = sum(_cpu_s(pid) for pid in pids)
    while time.monotonic() - started < most:
        time.sleep(1.0)
        now = sum(_cpu_s(pid) for pid in pids)
        if now - before < 0.1:
            break
        before = now
    return time.monotonic() - started


def _children(ppid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == ppid:
                found.append(int(entry.name))
    return found


class CpuMeter:
    """CPU seconds used by PostgreSQL (postmaster + live backends + backends already reaped),
    by given worker processes (and their children), by Redis and by this process, plus the
    machine's busy share (other users of this shared machine included)."""

    def __init__(self, worker_pids: list[int]) -> None:
        from config.embedded import var_dir

        self.postmaster = int((var_dir() / "postgres" / "postmaster.pid").read_text().split()[0])
        redis_pid = var_dir() / "redis" / "redis.pid"
        self.redis = int(redis_pid.read_text().split()[0]) if redis_pid.exists() else None
        self.workers = worker_pids
        self.start = self._sample()

    def _sample(self) -> dict[str, float]:
        import resource

        pg = _cpu_s(self.postmaster, children_reaped=True) + sum(
            _cpu_s(pid) for pid in _children(self.postmaster)
        )
        workers = sum(
            _cpu_s(pid, children_reaped=True) + sum(_cpu_s(c) for c in _children(pid))
            for pid in self.workers
        )
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(v) for v in cpu]
        idle = ticks[3] + ticks[4]
        return {
            "postgres": pg,
            "workers": workers,
            "redis": _cpu_s(self.redis) if self.redis else 0.0,
            "bench": usage.ru_utime + usage.ru_stime,
            "machine_total": sum(ticks) / _TICK,
            "machine_idle": idle / _TICK,
        }

    def stop(self) -> dict[str, float]:
        end = self._sample()
        delta = {k: end[k] - self.start[k] for k in end}
        total = delta.pop("machine_total")
        idle = delta.pop("machine_idle")
        delta["machine_busy_share"] = (total - idle) / total if total else 0.0
        return delta


# --------------------------------------------------------------------------- statistics


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    # nearest-rank percentile: honest with a few dozen samples
    rank = max(1, int(round(0.95 * len(ordered) + 0.4999)))
    return ordered[min(rank, len(ordered)) - 1]


# --------------------------------------------------------------------------- the app side


def bench_tenant(label: str):
    """A fresh tenant so bench runs never mix with the dev data."""
    from tenants.services import tenant_create

    slug = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    return tenant_create(slug=slug, name=f"bench {label}", actor_label="bench")


def principal_for(tenant):
    from tenants.principal import Principal

    return Principal(tenant=tenant, scopes=frozenset(), role=None, user=None)


@contextlib.contextmanager
def no_enqueue() -> Iterator[None]:
    """run_start enqueues on commit; the benches enqueue (or drive) runs themselves."""
    import agents.runtime.queue

    original = agents.runtime.queue.enqueue_run
    agents.runtime.queue.enqueue_run = lambda **_: None
    try:
        yield
    finally:
        agents.runtime.queue.enqueue_run = original


def create_runs(tenant, agent: str, count: int) -> list[str]:
    """`count` queued runs of `agent`, created by the service in one transaction."""
    from agents.runtime.services import run_start
    from tenants.scope import tenant_scope

    principal = principal_for(tenant)
    with no_enqueue(), tenant_scope(tenant.pk):
        return [str(run_start(principal=principal, agent=agent, input={}).pk) for _ in range(count)]


def cleanup_tenant(tenant) -> str:
    """Delete the bench tenant's runs and every per-step row; keep the tenant.

    Per-step rows have no foreign-key constraint to their run (see agents.runtime.models), so
    they are deleted explicitly, children first."""
    from django.db import connection

    from tenants.scope import tenant_scope

    try:
        with tenant_scope(tenant.pk), connection.cursor() as cursor:
            for table in (
                "agents_externalwrite",
                "agents_externalblob",
                "agents_externalcheckpoint",
                "agents_runevent",
                "agents_checkpoint",
                "agents_stepattempt",
                "agents_toolcall",
                "agents_run",
                "agents_agentsession",
            ):
                cursor.execute(f"DELETE FROM {table} WHERE tenant_id = %s", [str(tenant.pk)])
        return f"deleted the runs of tenant {tenant.slug}"
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort, the figures stand
        return f"left the runs of tenant {tenant.slug} in place ({type(exc).__name__}: {exc})"


def run_statuses(tenant_id: Any, run_ids: list[str]) -> dict[str, int]:
    from django.db import connection

    from tenants.scope import tenant_scope

    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*) FROM agents_run WHERE id = ANY(%s::uuid[]) GROUP BY status",
            [run_ids],
        )
        return dict(cursor.fetchall())


# --------------------------------------------------------------------------- workers


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)  # setup_django() put the embedded servers' URLs there
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        AGENTSTATE_AGENT_MODULES=AGENT_MODULES,
        PYTHONUNBUFFERED="1",
    )
    # As before workers warmed the model at start (config/celery.py): a bench's worker that
    # recalls loads it at its first recall, in the warm-up; one that does not (the engine's
    # no-op steps) would share the two cores with 13-16 s of loading torch while it is timed.
    env.setdefault("MEMORY_WARM_QUERY_MODEL", "0")
    env.update(extra)
    return env


class Worker:
    """A real Celery worker process (own process group, log under var/bench-logs)."""

    def __init__(
        self,
        name: str,
        *,
        queue: str,
        pool: str = "solo",
        concurrency: int = 1,
        env: dict[str, str] | None = None,
        app: str = "config",
    ) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = LOG_DIR / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                app,
                "worker",
                "--loglevel=INFO",
                f"--pool={pool}",
                f"--concurrency={concurrency}",
                f"--hostname={name}@%h",
                "-Q",
                queue,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=BASE_DIR,
            env=env or worker_env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_ready(self, timeout: float = 60) -> Worker:
        deadline = time.monotonic() + timeout
        while "ready." not in self.log_path.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {self.name} did not start:\n{tail}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
            except ProcessLookupError:
                pass
        self._log.close()


@contextlib.contextmanager
def workers(count: int, *, queue: str, label: str, **kwargs: Any) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for index in range(count):
            started.append(Worker(f"{label}{index + 1}-{os.getpid()}", queue=queue, **kwargs))
        for worker in started:
            worker.wait_ready()
        yield started
    finally:
        for worker in started:
            worker.stop()


def enqueue(tenant_id: Any, run_id: str, queue: str) -> None:
    """What agents.runtime.queue.enqueue_run sends, on the bench's own queue (so a dev worker that
    happens to share the broker never takes bench runs)."""
    from agents.runtime.tasks import run_step

    run_step.apply_async(kwargs={"tenant_id": str(tenant_id), "run_id": run_id}, queue=queue)


def dump_json(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- an AgentState server


def api_key_for(tenant) -> str:
    """A read/write API key of `tenant` (its raw secret), made by the services."""
    from tenants.scope import tenant_scope
    from tenants.services import api_key_create

    with tenant_scope(tenant.pk):
        return api_key_create(
            actor=principal_for(tenant), name="bench", scopes=["read", "write"]
        ).raw


@contextlib.contextmanager
def asgi_server(label: str, *, debug: bool = True, tree: str | None = None) -> Iterator[str]:
    """uvicorn serving AgentState (one process) on the bench's servers; yields its URL.
    `debug=False` serves it as production does (no query log, JSON logs, HSTS). `tree`: the
    checkout whose code it serves (default this one; bench/_langgraph_ab.py serves two)."""
    import socket
    from urllib.request import urlopen

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,  # setup_django() put the embedded servers' URLs there
        "DEBUG": "1" if debug else "0",
        **({} if debug else {"AGENTSTATE_DEMO": "0", "SECRET_KEY": "bench-" + "x" * 50}),
        "API_RATE_LIMIT_READ": "1000000/min",
        "API_RATE_LIMIT_WRITE": "1000000/min",
        "PYTHONUNBUFFERED": "1",
        **({"PYTHONPATH": f"{tree}:{tree}/sdk/python"} if tree else {}),
    }
    log = open(Path(tempfile.gettempdir()) / f"{label}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tree,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{label}: the server did not start ({log.name})") from None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        log.close()


# Words for the synthetic facts of the memory benches (memory_retrieval.py, memory_batch.py).
WORDS = [
    "email",
    "phone",
    "sms",
    "desk",
    "lamp",
    "order",
    "refund",
    "invoice",
    "shipping",
    "address",
    "city",
    "paris",
    "lyon",
    "berlin",
    "vegetarian",
    "allergy",
    "peanuts",
    "morning",
    "evening",
    "weekend",
    "manager",
    "account",
    "premium",
    "discount",
    "delivery",
    "courier",
    "warranty",
    "repair",
    "chair",
    "monitor",
    "keyboard",
    "language",
    "french",
    "german",
    "english",
    "birthday",
    "anniversary",
    "subscription",
    "monthly",
    "annual",
    "payment",
    "card",
    "bank",
    "transfer",
    "voucher",
]
CATEGORIES = ["preference", "profile", "task_outcome", "note"]
