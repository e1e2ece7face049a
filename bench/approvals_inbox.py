"""The approvals inbox with 10,000 pending requests across 100 tenants, and how long a run
waits between a manager's decision and a worker picking it up again.

    .venv/bin/python bench/approvals_inbox.py [--tenants 100] [--per-tenant 100]
                                              [--renders 200] [--decisions 40] [--keep]

1. **Inbox render.** Makes `--tenants` tenants `bench-inbox-<hex>-NNN`, each with
   `--per-tenant` pending requests on waiting runs (bulk rows in each tenant's context; 20%
   without a deadline, a few overdue, deadlines spread over two days) and one manager. Then,
   in-process with Django's test `Client` (the whole stack: sessions, auth, the tenant
   middleware and its transaction, the nav-badge context processor, templates), times GET
   /approvals/ for one manager, plus the third page by cursor, the htmx poll that finds
   nothing new (204) and the badge poll. Target: median page under 50 ms. The inbox query's
   plan is printed: it must be an index scan of `approval_inbox_pending`.
2. **Decision to resume.** One real Celery worker (`--pool=solo`) on a private queue; runs of
   a two-step agent (`ask` waits for approval, `done` finishes) are paused by it, then
   decided one at a time by `approvals.services.approval_decide`, which enqueues the run on
   commit. Latency is the decision's `decided_at` to the worker's claim (the next step's
   attempt `started_at`), and to the run's `finished_at`; both clocks are this host's.
   Target: p95 under 1 s.

Ends with one JSON line. The bench tenants and users are deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

LOG_DIR = BASE_DIR / "var" / "bench-logs"
AGENT = "bench_approval"
AGENT_MODULES = "agents.demo.refund_desk,bench.approvals_inbox"
INBOX_TARGET_MS = 50.0
RESUME_TARGET_MS = 1000.0


def register_agent() -> None:
    """Two steps: pause for a decision, then finish with it. Registered in the worker too."""
    from agents.runtime.definitions import Agent, finish, register, wait_for_approval

    agent = Agent(AGENT, version=1, first="ask")

    @agent.step
    def ask(ctx):
        return wait_for_approval(
            action="bench_action", arguments={"n": 1}, then="done", reason="bench", amount=1
        )

    @agent.step
    def done(ctx):
        return finish({"approved": ctx.decision["approved"]})

    register(agent)


if __name__ != "__main__":  # imported by the worker through AGENTSTATE_AGENT_MODULES
    register_agent()


# --- setup ----------------------------------------------------------------------------------------


def setup_django() -> None:
    from config import embedded

    os.environ.update(embedded.service_env({}))  # the embedded servers, always
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["AGENTSTATE_AGENT_MODULES"] = AGENT_MODULES
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    register_agent()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, int(round(q * len(ordered) + 0.4999)))
    return ordered[min(rank, len(ordered)) - 1]


def make_data(prefix: str, tenants: int, per_tenant: int) -> list:
    """Tenants, each with one manager and `per_tenant` pending requests on waiting runs."""
    import datetime as dt

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from agents.runtime.models import Run
    from approvals.models import ApprovalRequest
    from tenants.scope import tenant_scope
    from tenants.services import membership_add, tenant_create

    rng = random.Random(7)
    now = timezone.now()
    made = []
    for index in range(tenants):
        tenant = tenant_create(slug=f"{prefix}-{index:03}", name=f"Bench inbox {index}")
        user = get_user_model()(username=f"{prefix}-m{index:03}")
        user.set_unusable_password()
        user.save()
        membership_add(tenant=tenant, user=user, role="manager", actor_label="bench")
        with tenant_scope(tenant.pk):
            runs = Run.objects.bulk_create(
                Run(
                    tenant=tenant,
                    agent="refund_desk",
                    agent_version=1,
                    status="waiting_approval",
                    current_step="tools",
                    step_seq=4,
                    waiting_for="",
                )
                for _ in range(per_tenant)
            )
            requests = []
            for i, run in enumerate(runs):
                roll = rng.random()
                if roll < 0.2:
                    due = None
                elif roll < 0.25:
                    due = now - dt.timedelta(minutes=rng.randint(1, 600))
                else:
                    due = now + dt.timedelta(minutes=rng.randint(5, 2880))
                requests.append(
                    ApprovalRequest(
                        id=uuid.uuid4(),
                        tenant=tenant,
                        run=run,
                        checkpoint_seq=4,
                        step="tools",
                        action="issue_refund",
                        arguments={
                            "customer": f"c{i}@example.com",
                            "order": f"A-{1000 + i}",
                            "amount": f"{rng.randint(101, 900)}.00",
                        },
                        amount=rng.randint(101, 900),
                        reason="Refund for a duplicate charge.",
                        due_at=due,
                        started_by_label="bench",
                    )
                )
            ApprovalRequest.objects.bulk_create(requests)
            for run, request in zip(runs, requests, strict=True):
                run.waiting_for = str(request.pk)
            Run.objects.bulk_update(runs, ["waiting_for"])
        made.append((tenant, user))
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_approvalrequest; ANALYZE agents_run")
    return made


# --- 1. the inbox ---------------------------------------------------------------------------------


def time_get(client, url: str, renders: int, **headers) -> tuple[list[float], int]:
    for _ in range(10):  # warm caches, templates, connections
        client.get(url, **headers)
    samples, status = [], 0
    for _ in range(renders):
        t0 = time.perf_counter()
        response = client.get(url, **headers)
        samples.append((time.perf_counter() - t0) * 1000)
        status = response.status_code
    return samples, status


def inbox_plans(tenant) -> dict[str, str]:
    """EXPLAIN ANALYZE of the page query that `inbox_page` runs, for page 1 and page 4."""
    from django.db import connection, transaction

    from approvals.selectors import inbox_page
    from tenants.principal import Principal
    from tenants.scope import activate

    principal = Principal(tenant=tenant, scopes=frozenset({"read", "approve"}), role="manager")
    plans = {}
    captured: list = []

    def capture(execute, sql, params, many, context):
        if "ORDER BY" in sql and "approvals_approvalrequest" in sql:
            captured.append((sql, params))
        return execute(sql, params, many, context)

    with transaction.atomic():
        activate(tenant_id=tenant.pk)
        cursor_after = None
        for page in range(1, 5):
            with connection.execute_wrapper(capture):
                result = inbox_page(principal, after=cursor_after, limit=25)
            cursor_after = result.next
            if page in (1, 4):
                sql, params = captured[-1]
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params)
                    plans[f"page {page}"] = "\n".join(row[0] for row in cursor.fetchall())
    return plans


def bench_inbox(made: list, renders: int) -> dict:
    import re

    from django.db import connection
    from django.test import Client

    tenant, user = made[len(made) // 2]
    client = Client()
    client.force_login(user)
    first = client.get("/approvals/")
    assert first.status_code == 200, first.status_code
    html = first.content.decode()
    rows = len(re.findall(r'href="/approvals/[0-9a-f-]{36}/"', html))
    seen = re.search(r'"seen": "([0-9a-f]+)"', html.split('id="inbox-list"')[1]).group(1)
    badge = re.search(r'<span id="approvals-badge"[^>]*>(\d+)', html).group(1)
    page2 = re.search(r'href="/approvals/(\?after=[^"]+)"', html).group(1)
    page3_html = client.get("/approvals/" + page2).content.decode()
    page3 = re.search(r'href="/approvals/(\?after=[^"]+)"[^>]*>Next', page3_html).group(1)
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get("/approvals/")
    results = {}
    cases = [
        ("inbox page 1", "/approvals/", {}),
        ("inbox page 3 (cursor)", "/approvals/" + page3, {}),
        ("htmx poll, unchanged (204)", f"/approvals/?seen={seen}", {"HTTP_HX_REQUEST": "true"}),
        (
            "badge poll, unchanged (204)",
            f"/approvals/badge/?shown={badge}",
            {"HTTP_HX_REQUEST": "true"},
        ),
    ]
    for label, url, headers in cases:
        samples, status = time_get(client, url, renders, **headers)
        results[label] = {
            "status": status,
            "median_ms": round(statistics.median(samples), 2),
            "p95_ms": round(percentile(samples, 0.95), 2),
        }
    return {
        "tenant": tenant.slug,
        "rows_on_page": rows,
        "badge": int(badge),
        "queries_per_page": len(statements),
        "results": results,
        "plans": inbox_plans(tenant),
    }


# --- 2. decision to resume ------------------------------------------------------------------------


class Worker:
    def __init__(self, queue: str) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"approvals-inbox-worker-{os.getpid()}.log"
        self._log = open(self.log_path, "w")
        env = dict(os.environ)  # setup_django() put the embedded servers' URLs there
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            AGENTSTATE_AGENT_MODULES=AGENT_MODULES,
            PYTHONUNBUFFERED="1",
        )
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel=INFO",
             "--pool=solo", f"--hostname=bench-inbox-{os.getpid()}@%h", "-Q", queue,
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=BASE_DIR, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready." not in self.log_path.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start, see {self.log_path}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()


def bench_resume(tenant, user, decisions: int) -> dict:
    import agents.runtime.queue
    import agents.runtime.tasks
    from agents.runtime.models import Checkpoint, Run
    from agents.runtime.services import run_start
    from approvals.models import ApprovalRequest
    from approvals.services import approval_decide
    from tenants.principal import Principal
    from tenants.scope import tenant_scope

    queue = f"bench-inbox-{uuid.uuid4().hex[:8]}"

    def enqueue(*, tenant_id, run_id, countdown=None, eta=None) -> None:
        agents.runtime.tasks.run_step.apply_async(
            kwargs={"tenant_id": str(tenant_id), "run_id": str(run_id)},
            queue=queue, countdown=countdown, eta=eta,
        )  # fmt: skip

    agents.runtime.queue.enqueue_run = enqueue  # the engine and approval_decide look it up per call
    principal = Principal.for_member(tenant=tenant, user=user, role="manager")
    worker = Worker(queue)
    try:
        with tenant_scope(tenant.pk):
            runs = [run_start(principal=principal, agent=AGENT, input={}) for _ in range(decisions)]
        ids = [r.pk for r in runs]
        deadline = time.monotonic() + 120
        while True:
            with tenant_scope(tenant.pk):
                waiting = (
                    Run.objects.for_tenant(tenant)
                    .filter(pk__in=ids, status="waiting_approval")
                    .count()
                )
            if waiting == decisions:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {waiting} runs paused; see {worker.log_path}")
            time.sleep(0.05)
        claimed, finished = [], []
        for run in runs:
            with tenant_scope(tenant.pk):
                request = ApprovalRequest.objects.for_tenant(tenant).get(run=run)
                request = approval_decide(principal=principal, request=request, approve=True)
            # committed: the run is on the queue now
            deadline = time.monotonic() + 30
            while True:
                with tenant_scope(tenant.pk):
                    row = (
                        Run.objects.for_tenant(tenant)
                        .filter(pk=run.pk)
                        .values("status", "finished_at")[0]
                    )
                if row["status"] == "succeeded":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run.pk} did not resume; see {worker.log_path}")
                time.sleep(0.002)
            with tenant_scope(tenant.pk):
                attempt = Checkpoint.objects.for_tenant(tenant).get(run=run, step="done")
            claimed.append((attempt.started_at - request.decided_at).total_seconds() * 1000)
            finished.append((row["finished_at"] - request.decided_at).total_seconds() * 1000)
    finally:
        worker.stop()
    return {
        "decisions": decisions,
        "claimed_median_ms": round(statistics.median(claimed), 1),
        "claimed_p95_ms": round(percentile(claimed, 0.95), 1),
        "claimed_max_ms": round(max(claimed), 1),
        "finished_median_ms": round(statistics.median(finished), 1),
        "finished_p95_ms": round(percentile(finished, 0.95), 1),
    }


# --- cleanup and main -----------------------------------------------------------------------------


def cleanup(prefix: str) -> str:
    from django.contrib.auth import get_user_model

    from tenants.models import Tenant
    from tenants.scope import system_scope

    with system_scope("bench_cleanup"):
        deleted, _ = Tenant.objects.filter(slug__startswith=prefix).delete()
    get_user_model().objects.filter(username__startswith=prefix).delete()
    return f"deleted the bench tenants {prefix}-* and their {deleted} rows"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--per-tenant", type=int, default=100)
    parser.add_argument("--renders", type=int, default=200)
    parser.add_argument("--decisions", type=int, default=40)
    parser.add_argument("--keep", action="store_true", help="keep the bench tenants")
    args = parser.parse_args()
    setup_django()
    prefix = f"bench-inbox-{uuid.uuid4().hex[:6]}"
    t0 = time.perf_counter()
    made = make_data(prefix, args.tenants, args.per_tenant)
    created_s = time.perf_counter() - t0
    try:
        inbox = bench_inbox(made, args.renders)
        resume = bench_resume(*made[0], args.decisions)
    finally:
        note = "kept the bench tenants" if args.keep else cleanup(prefix)

    total = args.tenants * args.per_tenant
    print(f"\nApprovals inbox: {total:,} pending requests in {args.tenants} tenants "
          f"(made in {created_s:.1f} s); one manager of {inbox['tenant']}, "
          f"{inbox['rows_on_page']} rows a page, {inbox['queries_per_page']} queries a page, "
          f"badge {inbox['badge']}.\n")  # fmt: skip
    print(f"{'request':<30} {'status':>6} {'median ms':>10} {'p95 ms':>8}")
    for label, r in inbox["results"].items():
        print(f"{label:<30} {r['status']:>6} {r['median_ms']:>10.2f} {r['p95_ms']:>8.2f}")
    for page, plan in inbox["plans"].items():
        print(f"\nPlan of the inbox query, {page}:")
        print("\n".join("  " + line for line in plan.splitlines() if "Buffers" not in line))
    print(f"\nDecision to resume, {resume['decisions']} decisions one at a time, 1 worker:\n")
    print(f"{'decided_at ->':<30} {'median ms':>10} {'p95 ms':>8}")
    print(
        f"{'worker claimed the run':<30} {resume['claimed_median_ms']:>10.1f} "
        f"{resume['claimed_p95_ms']:>8.1f}"
    )
    print(f"{'run finished':<30} {resume['finished_median_ms']:>10.1f} "
          f"{resume['finished_p95_ms']:>8.1f}")  # fmt: skip
    print(f"\n{note}.")
    page = inbox["results"]["inbox page 1"]["median_ms"]
    ok = page < INBOX_TARGET_MS and resume["claimed_p95_ms"] < RESUME_TARGET_MS
    summary = {
        "bench": "approvals_inbox",
        "pending": total,
        "tenants": args.tenants,
        "inbox_median_ms": page,
        "inbox_p95_ms": inbox["results"]["inbox page 1"]["p95_ms"],
        "inbox_target_ms": INBOX_TARGET_MS,
        "page3_median_ms": inbox["results"]["inbox page 3 (cursor)"]["median_ms"],
        "poll_204_median_ms": inbox["results"]["htmx poll, unchanged (204)"]["median_ms"],
        "badge_204_median_ms": inbox["results"]["badge poll, unchanged (204)"]["median_ms"],
        "queries_per_page": inbox["queries_per_page"],
        "index_scan": all("approval_inbox_pending" in p for p in inbox["plans"].values()),
        **{f"resume_{k}": v for k, v in resume.items()},
        "resume_target_ms": RESUME_TARGET_MS,
        "ok": ok,
    }
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
