"""Load on the console as `make run` serves it: 12 logged-in browser sessions and 4 API clients,
closed loop (each sends its next request when the last one answered), for 60 s.

    .venv/bin/python bench/load.py [--seconds 60] [--browsers 12] [--api 4]

Launches the stack exactly as `make run` does (`config.embedded exec -- config.run`, with its
own data directory `var/bench-load`, kept between runs), logs the demo users in through the
login form, makes one API key, then measures: requests/s, p50/p95/max latency, every 5xx, and
the PostgreSQL connections held by the application role, sampled every 0.25 s (peak, and
the peak of the first and the last quarter: flat, not climbing). Browser sessions fetch the
pages people look at (runs, a run page they can see, approvals, memory, conversations,
the console for admins); API clients list and read runs and approvals and start a demo run
every 2 s each.

Targets on a 2-core machine: >= 150 requests/s, p95 <= 250 ms, 0 5xx, peak connections <= 40.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.request import urlopen

import aiohttp

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
VAR_DIR = BASE_DIR / "var" / "bench-load"
TARGETS = {"rps": 150.0, "p95_ms": 250.0, "peak_connections": 40}
BROWSER_USERS = ["admin", "manager", "viewer", "alice", "bob"]
MEMBERS = {"alice", "bob"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """`make run` in a process group of its own; Ctrl-C (SIGINT) stops it."""

    def __init__(self, port: int, log: Path) -> None:
        env = {
            **os.environ,
            "AGENTSTATE_VAR_DIR": str(VAR_DIR),
            "WEB_PORT": str(port),
            "DEBUG": os.environ.get("DEBUG", "1"),
            "AGENTSTATE_DEMO": "1",
            # Closed-loop API clients read as fast as they are answered: far past the default
            # 600 reads a minute per key, and a fast 429 would flatter requests/s. Run starts
            # (one every 2 s per client) stay under the default write limit.
            "API_RATE_LIMIT_READ": os.environ.get("API_RATE_LIMIT_READ", "100000/min"),
        }
        for name in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY"):
            env.pop(name, None)
        self._log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "config.embedded", "exec", "--"]
            + [sys.executable, "-m", "config.run"],
            cwd=BASE_DIR,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the stack exited; see var/bench-logs/load-stack.log")
            with contextlib.suppress(OSError):
                with urlopen(self.url + "/login/", timeout=1) as response:
                    if response.status == 200:
                        return
            time.sleep(0.2)
        raise RuntimeError("no 200 on /login/ in time")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


class ConnectionSampler(threading.Thread):
    """Counts the app role's PostgreSQL connections (a superuser sees every backend)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import psycopg

        from config import embedded

        info = embedded._pg_info()
        assert info is not None
        self._conn = psycopg.connect(info.super_url, autocommit=True)
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.25):
            (n,) = self._conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = 'agentstate'"
            ).fetchone()
            self.samples.append((time.monotonic(), n))

    def stop(self) -> dict[str, int]:
        self._halt.set()
        self.join()
        self._conn.close()
        counts = [n for _, n in self.samples] or [0]
        quarter = max(1, len(counts) // 4)
        return {
            "peak": max(counts),
            "first_quarter_peak": max(counts[:quarter]),
            "last_quarter_peak": max(counts[-quarter:]),
        }


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def stack_processes(stack_pid: int) -> dict[str, list[int]]:
    """The stack's processes by role: web, worker and beat (descendants of the launcher), and
    the embedded PostgreSQL and Redis (daemons of their own)."""
    from bench import _common

    roles: dict[str, list[int]] = {"web": [], "worker": [], "beat": []}
    for pid in _descendants(stack_pid):
        line = _cmdline(pid)
        if "celery" in line:
            roles["beat" if " beat" in line else "worker"].append(pid)
        elif "uvicorn" in line or "multiprocessing" in line:
            roles["web"].append(pid)
    servers = _common._server_pids()
    roles["postgres"] = [p for p in servers if "redis" not in _cmdline(p)]
    roles["redis"] = [p for p in servers if "redis" in _cmdline(p)]
    return roles


def cpu_by_role(roles: dict[str, list[int]]) -> dict[str, float]:
    from bench import _common

    return {role: sum(_common._cpu_s(pid) for pid in pids) for role, pids in roles.items()}


def make_api_keys(count: int) -> list[str]:
    """Read+write keys of the demo tenant (one per API client, as separate integrations
    would have), made through the service as an admin would."""
    from config import embedded

    os.environ.update(embedded.service_env())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()

    from django.contrib.auth import get_user_model

    from tenants import services
    from tenants.models import Role, Tenant
    from tenants.principal import Principal
    from tenants.scope import system_scope, tenant_scope

    with system_scope("bench_load"):
        tenant = Tenant.objects.get(slug="acme")
    admin = get_user_model().objects.get(username="admin")
    with tenant_scope(tenant.pk, user_id=admin.pk):
        actor = Principal.for_member(tenant=tenant, user=admin, role=Role.ADMIN)
        return [
            services.api_key_create(
                actor=actor, name=f"bench-load-{int(time.time())}-{i}", scopes=["read", "write"]
            ).raw
            for i in range(count)
        ]


class Recorder:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.status: dict[int, int] = {}
        self.errors: list[str] = []
        self.slowest: list[tuple[float, str]] = []

    def add(self, label: str, seconds: float, status: int) -> None:
        self.latencies.append(seconds)
        self.status[status] = self.status.get(status, 0) + 1
        if status >= 500:
            self.errors.append(f"{status} {label}")
        self.slowest.append((seconds, label))
        if len(self.slowest) > 200:
            self.slowest = sorted(self.slowest, reverse=True)[:20]


class Answer:
    def __init__(self, status: int, body: bytes) -> None:
        self.status_code, self.body = status, body

    def json(self):
        return json.loads(self.body)


async def timed(client: aiohttp.ClientSession, rec: Recorder, method: str, url: str, **kw):
    """One request, timed to its last byte; an error that is not an answer counts as 599."""
    started = time.perf_counter()
    try:
        async with client.request(method, url, allow_redirects=False, **kw) as response:
            answer = Answer(response.status, await response.read())
    except (aiohttp.ClientError, TimeoutError) as exc:
        rec.add(f"{method} {url} {type(exc).__name__}", time.perf_counter() - started, 599)
        return None
    rec.add(f"{method} {url}", time.perf_counter() - started, answer.status_code)
    return answer


def session(url: str, **kw) -> aiohttp.ClientSession:
    # aiohttp's C parser costs the shared CPUs far less per request than a pure-Python
    # client, so the figures are the server's. unsafe: keep cookies for 127.0.0.1.
    return aiohttp.ClientSession(
        base_url=url,
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        timeout=aiohttp.ClientTimeout(total=30),
        **kw,
    )


async def login(client: aiohttp.ClientSession, url: str, username: str, password: str) -> None:
    async with client.get("/login/") as page:
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', await page.text())
    assert token, "no CSRF token on the login page"
    form = {"username": username, "password": password, "csrfmiddlewaretoken": token[1]}
    async with client.post(
        "/login/", data=form, headers={"Referer": url + "/login/"}, allow_redirects=False
    ) as response:
        if response.status != 302:
            raise RuntimeError(f"login of {username} answered {response.status}")


async def browser(url: str, user: str, password: str, run_ids: list[str], rec, stop_at):
    async with session(url) as client:
        await login(client, url, user, password)
        pages = ["/", "/runs/", "/approvals/", "/memory/", "/conversations/"]
        if user == "admin":
            pages.append("/console/")
        # Members (end users) see only their own runs, and the API's runs are nobody's: like a
        # person, they open only run pages their list shows them (no 404 by design).
        if user not in MEMBERS:
            pages.append("run")
        while time.monotonic() < stop_at:
            path = random.choice(pages)
            if path == "run":
                if not run_ids:
                    continue
                path = f"/runs/{random.choice(run_ids)}/"
            await timed(client, rec, "GET", path)


async def api_client(url: str, key: str, run_ids: list[str], rec, stop_at):
    headers = {"Authorization": f"Bearer {key}"}
    async with session(url, headers=headers) as client:
        next_start = time.monotonic()
        while time.monotonic() < stop_at:
            if time.monotonic() >= next_start:
                next_start += 2.0
                body = {
                    "agent": "refund_desk",
                    "input": {"customer": f"c-{random.randint(1, 50)}", "message": "hello"},
                }
                response = await timed(client, rec, "POST", "/api/v1/runs", json=body)
                if response is not None and response.status_code == 201:
                    run_ids.append(response.json()["id"])
                continue
            choice = random.random()
            if choice < 0.4:
                await timed(client, rec, "GET", "/api/v1/runs?limit=20")
            elif choice < 0.7 and run_ids:
                await timed(client, rec, "GET", f"/api/v1/runs/{random.choice(run_ids)}")
            elif choice < 0.9:
                await timed(client, rec, "GET", "/api/v1/approvals?limit=20")
            else:
                await timed(client, rec, "GET", "/api/v1/me")


async def drive(url: str, keys: list[str], creds: dict, seconds: float, browsers: int):
    run_ids: list[str] = []
    warm = Recorder()
    # A few runs first, so run pages have something to show; and a warm-up pass.
    await asyncio.gather(
        *(api_client(url, key, run_ids, warm, time.monotonic() + 3) for key in keys[:2])
    )
    rec = Recorder()
    stop_at = time.monotonic() + seconds
    users = [BROWSER_USERS[i % len(BROWSER_USERS)] for i in range(browsers)]
    tasks = [browser(url, u, creds[u], run_ids, rec, stop_at) for u in users]
    tasks += [api_client(url, key, run_ids, rec, stop_at) for key in keys]
    started = time.monotonic()
    await asyncio.gather(*tasks)
    return rec, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--browsers", type=int, default=12)
    parser.add_argument("--api", type=int, default=4)
    args = parser.parse_args()
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    os.environ["AGENTSTATE_VAR_DIR"] = str(VAR_DIR)
    log_dir = BASE_DIR / "var" / "bench-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(free_port(), log_dir / "load-stack.log")
    try:
        stack.wait_ready()
        creds = json.loads((VAR_DIR / "demo-credentials.json").read_text())
        keys = make_api_keys(args.api)
        sampler = ConnectionSampler()
        sampler.start()
        roles = stack_processes(stack.proc.pid)
        from bench import _common

        settled = _common.wait_settled(roles["web"] + roles["worker"])
        print(f"the stack settled {settled:.0f} s after it was ready (model warm-up)")
        cpu_before, own_before = cpu_by_role(roles), sum(os.times()[:2])
        rec, elapsed = asyncio.run(drive(stack.url, keys, creds, args.seconds, args.browsers))
        cpu_after, own_after = cpu_by_role(roles), sum(os.times()[:2])
        connections = sampler.stop()
    finally:
        stack.stop()
    total = len(rec.latencies)
    rps = total / elapsed
    from bench import _common  # after BASE_DIR is on sys.path

    p50 = _common.median(rec.latencies) * 1000 if total else 0.0
    p95 = _common.p95(rec.latencies) * 1000 if total else 0.0
    worst = max(rec.latencies, default=0) * 1000
    fivexx = sum(n for code, n in rec.status.items() if code >= 500)
    print(
        f"{'clients':<10}{'requests':>10}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}"
        f"{'5xx':>6}{'pg conns peak (first/last quarter)':>38}"
    )
    print(
        f"{args.browsers}b+{args.api}api{'':<3}{total:>10}{rps:>9.1f}{p50:>9.1f}{p95:>9.1f}"
        f"{worst:>9.1f}{fivexx:>6}{connections['peak']:>22} "
        f"({connections['first_quarter_peak']}/{connections['last_quarter_peak']})"
    )
    print("statuses:", dict(sorted(rec.status.items())))
    # Includes the warm-up's few seconds of worker time; the web's is the measured window.
    cpu_ms = {role: (cpu_after[role] - cpu_before[role]) * 1000 / max(total, 1) for role in roles}
    cpu_ms["load generator"] = (own_after - own_before) * 1000 / max(total, 1)
    print(
        "CPU ms per request: "
        + ", ".join(f"{role} {ms:.2f}" for role, ms in cpu_ms.items())
        + f"  (processes: web {len(roles['web'])}, postgres {len(roles['postgres'])})"
    )
    for seconds, label in sorted(rec.slowest, reverse=True)[:5]:
        print(f"  slow: {seconds * 1000:7.1f} ms  {label}")
    for line in rec.errors[:10]:
        print("  5xx:", line)
    met = (
        rps >= TARGETS["rps"]
        and p95 <= TARGETS["p95_ms"]
        and fivexx == 0
        and connections["peak"] <= TARGETS["peak_connections"]
    )
    result = {
        "bench": "load",
        "seconds": round(elapsed, 1),
        "browsers": args.browsers,
        "api_clients": args.api,
        "requests": total,
        "rps": round(rps, 1),
        "p50_ms": round(p50, 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(worst, 1),
        "status": {str(k): v for k, v in sorted(rec.status.items())},
        "5xx": fivexx,
        "pg_connections": connections,
        "cpu_ms_per_request": {role: round(ms, 2) for role, ms in cpu_ms.items()},
        "targets": TARGETS,
        "met": met,
    }
    print(json.dumps(result))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
