"""Live progress: commit-to-browser latency, and how many idle sockets one ASGI process holds.

    .venv/bin/python bench/live_latency.py [--steps 200] [--pace 0.03] [--clients 1000]
                                           [--web-processes 1]

1. Latency. A real Celery worker runs a 200-step agent (each step sleeps `--pace` seconds, so
   steps commit one by one); Chromium shows the run page of one uvicorn process. An init
   script's MutationObserver notes when each event's line enters the DOM
   (performance.timeOrigin + now, epoch ms); the commit time is the event row's created_at
   (clock_timestamp() in the statement that persists the step, just before COMMIT, on the
   same machine's clock). Latency = DOM time - commit time, per step: p50 and p95.
   Target p95 <= 100 ms.
2. Idle clients. `--clients` websockets (Python `websockets`, each with its own session
   cookie sent as a browser would) connect to one uvicorn process and subscribe to a run page;
   the process's RSS before and after gives memory per client. Then one event is published
   and the bench counts the sockets it reaches. Target >= 1,000 held and reached.
   With `--web-processes 2 --clients 5000` the sockets are shared out over two uvicorn
   processes (the event reaches both through Redis), and the bench prints the web CPU that one
   event cost: the processes' CPU time over the fan-out, less what they spend idle in as long
   (websocket pings), measured just before.

Embedded PostgreSQL and Redis under ./var (or AGENTSTATE_VAR_DIR), migrated first, durability
settings untouched. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.runtime.definitions import Agent, finish, goto, register  # noqa: E402

AGENT = "bench_live_paced"
QUEUE = f"bench-live-{os.getpid()}"
TARGET_P95_MS = 100.0
TARGET_CLIENTS = 1000
STEPS = 200

# --- the agent: imported by the worker too (AGENTSTATE_AGENT_MODULES), so defined at import.


def _paced(steps: int) -> Agent:
    agent = Agent(AGENT, version=1, first="s0", description="bench: steps that take a while")
    for index in range(steps):

        def step(ctx, _i=index, _last=index == steps - 1):
            time.sleep(float(os.environ.get("BENCH_LIVE_PACE", "0.03")))
            return finish({"steps": _i + 1}) if _last else goto(f"s{_i + 1}", i=_i + 1)

        step.__name__ = f"s{index}"
        agent.step(step)
    return register(agent)


_paced(STEPS)


# --- helpers --------------------------------------------------------------------------------------


def setup() -> None:
    from bench import _common as common

    common.setup_django()
    common.assert_durable()


def make_user(tenant, role: str = "manager"):
    from django.contrib.auth import get_user_model

    from tenants.services import membership_add

    user = get_user_model().objects.create_user(username=f"bench-{uuid.uuid4().hex[:10]}")
    membership_add(tenant=tenant, user=user, role=role)
    return user


def session_for(user) -> str:
    """A logged-in session, made the way django.contrib.auth.login makes one."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "tenants.auth.backends.UserBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key or ""


def start_web() -> tuple[subprocess.Popen, str]:
    from bench import _common as common

    port = _free_port()
    log = open(common.LOG_DIR / f"live-web-{port}.log", "w")  # noqa: SIM115
    env = common.worker_env(
        AGENTSTATE_AGENT_MODULES=f"{common.AGENT_MODULES},bench.live_latency",
        MEMORY_WARM_QUERY_MODEL="1",  # a web process as deployed (worker_env's default is 0)
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        + ["--port", str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"],
        cwd=common.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            from urllib.request import urlopen

            urlopen(url + "/login/", timeout=1)
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start, see {log.name}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def new_run(tenant, user) -> str:
    from agents.runtime.services import run_start
    from bench import _common as common
    from tenants.principal import Principal

    principal = Principal.for_member(tenant=tenant, user=user, role="manager")
    with common.no_enqueue(), _tenant(tenant):
        return str(run_start(principal=principal, agent=AGENT, input={}).pk)


def _tenant(tenant):
    from tenants.scope import tenant_scope

    return tenant_scope(tenant.pk)


# --- 1. commit-to-browser latency -----------------------------------------------------------------

OBSERVER = """
window.__seen = {};
new MutationObserver((mutations) => {
  const now = performance.timeOrigin + performance.now();
  for (const m of mutations) for (const n of m.addedNodes) {
    if (n.id && n.id.startsWith("event-") && !(n.id in window.__seen)) window.__seen[n.id] = now;
  }
}).observe(document, {childList: true, subtree: true});
"""


def wait_for(page, expression: str, timeout: float) -> None:
    """Poll with evaluate (wait_for_function evals a string, which the page's CSP forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {expression}")
        time.sleep(0.05)


def latency(tenant, user, url: str, steps: int, pace: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from agents.runtime.models import RunEventLog
    from bench import _common as common

    chromium = os.environ.get("CHROMIUM_PATH") or next(
        (p for p in ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium") if Path(p).exists()),
        "/usr/bin/chromium-headless-shell",
    )
    run_id = new_run(tenant, user)
    session = session_for(user)  # before Playwright: its event loop makes this thread async
    worker_env = common.worker_env(
        AGENTSTATE_AGENT_MODULES=f"{common.AGENT_MODULES},bench.live_latency",
        AGENTSTATE_SLICE_SECONDS="3600",
        BENCH_LIVE_PACE=str(pace),
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
        page = context.new_page()
        page.add_init_script(OBSERVER)
        response = page.goto(f"{url}/runs/{run_id}/")
        if response is None or response.status != 200 or page.url != f"{url}/runs/{run_id}/":
            raise RuntimeError(
                f"the run page answered {response and response.status} at {page.url}"
            )
        wait_for(page, "document.querySelector('.live-root').liveSocket !== undefined", 30)
        worker = common.Worker(f"live-bench-{os.getpid()}", queue=QUEUE, env=worker_env)
        try:
            worker.wait_ready()
            started = time.monotonic()
            common.enqueue(tenant.pk, run_id, QUEUE)
            wait_for(
                page,
                "document.querySelector('#run-summary .status-succeeded') !== null",
                steps * pace * 4 + 60,
            )
            took = time.monotonic() - started
            time.sleep(0.5)
            seen: dict[str, float] = page.evaluate("window.__seen")
        finally:
            worker.stop()
            browser.close()
    with _tenant(tenant):
        rows = list(
            RunEventLog.objects.for_tenant(tenant)
            .filter(run_id=run_id, kind="step.finished")
            .values_list("seq", "created_at")
        )
    lat = [
        seen[f"event-{seq}"] - at.timestamp() * 1000 for seq, at in rows if f"event-{seq}" in seen
    ]
    return {
        "steps": len(rows),
        "shown": len(lat),
        "p50_ms": round(pct(lat, 0.5), 1),
        "p95_ms": round(pct(lat, 0.95), 1),
        "max_ms": round(max(lat), 1),
        "run_s": round(took, 1),
    }


# --- 2. idle clients ------------------------------------------------------------------------------


async def _hold(url: str, cookies: list[str], run_id: str, after: int) -> dict[str, Any]:
    import websockets

    ws_url = url.replace("http://", "ws://") + "/ws/live/"
    gate = asyncio.Semaphore(50)
    message = {"type": "subscribe", "kind": "run", "run": run_id, "after": after}
    sockets: list[Any] = []

    async def open_one(cookie: str) -> None:
        async with gate:
            ws = await websockets.connect(
                ws_url,
                additional_headers={"Cookie": f"sessionid={cookie}", "Origin": url},
                open_timeout=60,
                ping_interval=None,
            )
            await ws.send(json.dumps(message))
            sockets.append(ws)

    started = time.monotonic()
    await asyncio.gather(*(open_one(c) for c in cookies))
    return {"sockets": sockets, "connect_s": time.monotonic() - started}


async def _reach(sockets: list[Any], timeout: float) -> tuple[int, float]:
    started = time.monotonic()

    async def one(ws) -> float | None:
        try:
            await asyncio.wait_for(ws.recv(), timeout)
            return time.monotonic() - started
        except Exception:  # noqa: BLE001 - a socket that gets nothing counts as not reached
            return None

    results = await asyncio.gather(*(one(ws) for ws in sockets))
    reached = [r for r in results if r is not None]
    return len(reached), max(reached) if reached else float("nan")


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU time of these processes so far, in ms."""
    from bench import _common

    return sum(_common._cpu_s(pid) for pid in pids) * 1000


def idle_clients(tenant, count: int, webs: list[tuple[int, str]]) -> dict[str, Any]:
    from django.db import transaction

    from agents.live.broadcast import flush
    from agents.runtime.progress import publish

    user = make_user(tenant)
    run_id = new_run(tenant, user)
    users = [make_user(tenant, "viewer") for _ in range(count)]
    cookies = [session_for(u) for u in users]

    pids = [pid for pid, _ in webs]
    warm_n = 10 * len(webs)

    async def hold(part: list[str]) -> dict[str, Any]:
        """Connect `part`'s cookies, shared out over the web processes in turn."""
        per_web = [_hold(url, part[i :: len(webs)], run_id, 1) for i, (_, url) in enumerate(webs)]
        held = await asyncio.gather(*per_web)
        return {
            "sockets": [ws for h in held for ws in h["sockets"]],
            "connect_s": max(h["connect_s"] for h in held),
        }

    async def scenario() -> dict[str, Any]:
        warm = await hold(cookies[:warm_n])
        await asyncio.sleep(2)
        before = sum(rss_kib(pid) for pid in pids)
        held = await hold(cookies[warm_n:])
        await asyncio.sleep(3)
        after = sum(rss_kib(pid) for pid in pids)
        sockets = warm["sockets"] + held["sockets"]
        open_now = sum(1 for ws in sockets if ws.close_code is None)
        idle_started, idle_cpu = time.monotonic(), cpu_ms(pids)
        await asyncio.sleep(2)
        idle_rate = (cpu_ms(pids) - idle_cpu) / (time.monotonic() - idle_started)
        poked_at, poked_cpu = time.monotonic(), cpu_ms(pids)

        def poke() -> None:
            with _tenant(tenant), transaction.atomic():
                publish(tenant_id=tenant.pk, run_id=run_id, kind="run.status", status="queued")
            flush()

        await asyncio.to_thread(poke)
        reached, fan_out_s = await _reach(sockets, 60)
        spent = cpu_ms(pids) - poked_cpu
        event_cpu = spent - idle_rate * (time.monotonic() - poked_at)
        for ws in sockets:
            await ws.close()
        return {
            "web_processes": len(webs),
            "event_cpu_ms": round(event_cpu, 1),
            "idle_cpu_ms_per_s": round(idle_rate, 1),
            "clients": len(sockets),
            "open": open_now,
            "reached": reached,
            "connect_s": round(held["connect_s"], 1),
            "fan_out_s": round(fan_out_s, 2),
            "rss_before_mib": round(before / 1024, 1),
            "rss_after_mib": round(after / 1024, 1),
            "kib_per_client": round((after - before) / max(1, len(held["sockets"])), 1),
        }

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return asyncio.run(scenario())


# --- main -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS, choices=[STEPS])
    parser.add_argument("--pace", type=float, default=0.03, help="seconds each step sleeps")
    parser.add_argument("--clients", type=int, default=TARGET_CLIENTS)
    parser.add_argument("--skip", default="", help="latency or clients")
    parser.add_argument("--web-processes", type=int, default=1)
    args = parser.parse_args()
    setup()
    from bench import _common as common

    common.LOG_DIR.mkdir(parents=True, exist_ok=True)
    tenant = common.bench_tenant("live")
    user = make_user(tenant)
    webs = [start_web() for _ in range(args.web_processes)]
    proc, url = webs[0]
    result: dict[str, Any] = {"bench": "live_latency"}
    try:
        settled = common.wait_settled([p.pid for p, _ in webs], most=120.0)
        print(f"the web processes settled {settled:.0f} s after they were ready (model warm-up)")
        if "latency" not in args.skip:
            result["latency"] = latency(tenant, user, url, args.steps, args.pace)
        if "clients" not in args.skip:
            result["idle"] = idle_clients(tenant, args.clients, [(p.pid, u) for p, u in webs])
    finally:
        for web, _ in webs:
            stop(web)
        print(cleanup(tenant), file=sys.stderr)
    print_table(result, args)
    lat, idle = result.get("latency"), result.get("idle")
    result["ok"] = bool(
        (lat is None or (lat["p95_ms"] <= TARGET_P95_MS and lat["shown"] == lat["steps"]))
        and (idle is None or idle["reached"] >= max(TARGET_CLIENTS, args.clients))
    )
    common.dump_json(result)
    return 0 if result["ok"] else 1


def cleanup(tenant) -> str:
    """The bench tenant's events first (they reference the runs), then its runs."""
    from django.db import connection

    from bench import _common as common

    with _tenant(tenant), connection.cursor() as cursor:
        cursor.execute("DELETE FROM agents_runevent WHERE tenant_id = %s", [str(tenant.pk)])
    return common.cleanup_tenant(tenant)


def print_table(result: dict[str, Any], args: argparse.Namespace) -> None:
    rows: list[tuple[str, str, str]] = []
    lat = result.get("latency")
    if lat:
        rows += [
            (
                f"steps committed / shown in the DOM (pace {args.pace * 1000:.0f} ms)",
                f"{lat['steps']} / {lat['shown']}",
                "",
            ),
            ("commit -> DOM latency p50", f"{lat['p50_ms']} ms", ""),
            ("commit -> DOM latency p95", f"{lat['p95_ms']} ms", f"<= {TARGET_P95_MS:.0f} ms"),
            ("commit -> DOM latency max", f"{lat['max_ms']} ms", ""),
        ]
    idle = result.get("idle")
    if idle:
        rows += [
            (
                f"idle sockets held by {idle['web_processes']} uvicorn process(es)",
                f"{idle['open']} / {idle['clients']}",
                f">= {TARGET_CLIENTS}",
            ),
            ("connect + subscribe time for them", f"{idle['connect_s']} s", ""),
            ("sockets reached by one event", f"{idle['reached']}", f">= {TARGET_CLIENTS}"),
            ("time until the last one got it", f"{idle['fan_out_s']} s", ""),
            (
                "uvicorn RSS before / after (all processes)",
                f"{idle['rss_before_mib']} / {idle['rss_after_mib']} MiB",
                "",
            ),
            ("memory per idle client", f"{idle['kib_per_client']} KiB", ""),
            ("web CPU for that one event (all processes)", f"{idle['event_cpu_ms']} ms", ""),
            ("web CPU while idle (pings)", f"{idle['idle_cpu_ms_per_s']} ms/s", ""),
        ]
    width = max(len(r[0]) for r in rows)
    print(f"{'live progress':<{width}}  {'measured':>22}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>22}  {target}")


if __name__ == "__main__":
    sys.exit(main())
