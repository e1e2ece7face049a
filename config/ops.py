"""Operations endpoints: /healthz (the process answers), /readyz (database, Redis, broker and
at least one live worker), /metrics (Prometheus).

They are answered by `OpsMiddleware`, first in the stack: no session, no request
transaction, so a probe costs nothing it does not check. Metrics that live in the database
(runs by status, stuck runs, pending approvals) are counted at scrape time, so they are
right whichever process serves the scrape; engine counters come from Redis
(agents/runtime/metrics.py); the queue depth is the broker list's length.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis.exceptions
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from agents.console import stuck
from agents.runtime import metrics as engine_metrics
from agents.runtime.metrics import redis_client
from agents.runtime.models import Run, RunCount, RunStatus
from agents.runtime.queue import queue_keys
from approvals.models import ApprovalRequest, ApprovalStatus
from config.celery import app
from tenants.scope import system_scope

logger = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up (and touches nothing else)."""
    return JsonResponse({"status": "ok"})


class NotReady(Exception):
    """A check's own verdict, safe to show (unlike an exception's text, which may carry a
    host name, a user or a path, and goes to the log only)."""


def _check(name: str, fn: Callable[[], str]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        detail, ok = fn(), True
    except NotReady as exc:
        detail, ok = str(exc), False
    except Exception:  # every failure is a "not ready" answer; why is for the log
        logger.warning("readyz: the %s check failed", name, exc_info=True)
        detail, ok = "unreachable (see the server log)", False
    return {"ok": ok, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


def _redis() -> str:
    redis_client().ping()
    return "ok"


def _broker() -> str:
    timeout = settings.AGENTSTATE_READY_PING_TIMEOUT_SECONDS
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout)
    return "ok"


def _workers() -> str:
    # limit=1: ready means at least one worker is live, so stop at the first answer instead
    # of waiting out the whole timeout to hear from every worker.
    timeout = settings.AGENTSTATE_READY_PING_TIMEOUT_SECONDS
    try:
        replies = app.control.ping(timeout=timeout, limit=1)
    except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
        # A pooled connection that a restarted Redis closed fails once: ask again on a new one.
        replies = app.control.ping(timeout=timeout, limit=1)
    names = sorted(name for reply in replies or [] for name in reply)
    if not names:
        raise NotReady("no Celery worker answered a ping")
    return f"a worker answered: {names[0][:200]}"


def readyz(request: HttpRequest) -> HttpResponse:
    """503 unless the database, Redis and the broker answer and at least one worker is live."""
    checks = {
        "database": _check("database", _database),
        "redis": _check("redis", _redis),
        "broker": _check("broker", _broker),
    }
    # Pinging workers goes through the broker: pointless (and slow) if it is down.
    checks["workers"] = (
        _check("workers", _workers)
        if checks["broker"]["ok"]
        else {"ok": False, "detail": "broker unreachable", "ms": 0}
    )
    ready = all(c["ok"] for c in checks.values())
    body = {"status": "ready" if ready else "not ready", "checks": checks}
    return JsonResponse(body, status=200 if ready else 503)


class DatabaseCollector:
    """Counts read at scrape time: runs by status, stuck runs by reason, pending approvals,
    the queue's depth, and the engine counters workers keep in Redis."""

    def collect(self) -> Iterator[Metric]:
        yield from _database_metrics()
        yield from _redis_metrics()


def _database_metrics() -> Iterator[Metric]:
    from django.db.models import Sum
    from django.utils import timezone

    now = timezone.now()
    with system_scope("metrics_scrape"):
        # The kept counts (agents_runcount) and the stuck sweep's stored ones: a scrape costs
        # the same however many runs there are (counted afresh only while no sweep stores).
        by_status = dict(RunCount.objects.order_by().values_list("status").annotate(n=Sum("n")))
        stuck_counts = stuck.stored_totals() or stuck.counts(Run.objects.all(), now)
        pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).count()
    runs = GaugeMetricFamily("agentstate_runs", "Runs by status.", labels=["status"])
    for status in RunStatus.values:
        runs.add_metric([status], by_status.get(status, 0))
    yield runs
    stuck_gauge = GaugeMetricFamily(
        "agentstate_stuck_runs", "Runs that need an admin, by reason.", labels=["reason"]
    )
    for code, n in stuck_counts.items():
        stuck_gauge.add_metric([code], n)
    yield stuck_gauge
    yield GaugeMetricFamily(
        "agentstate_approvals_pending", "Approval requests waiting for a decision.", value=pending
    )


def _redis_metrics() -> Iterator[Metric]:
    queue = settings.AGENTSTATE_QUEUE_NAME
    depth = GaugeMetricFamily(
        "agentstate_queue_depth", "Messages waiting in the Celery queue.", labels=["queue"]
    )
    pipe = engine_metrics.redis_client().pipeline(transaction=False)
    for key in queue_keys(queue):  # one list per priority step
        pipe.llen(key)
    depth.add_metric([queue], sum(pipe.execute()))
    yield depth
    stored = engine_metrics.read()
    durations = stored["durations"]
    buckets, running = [], 0.0
    for le in engine_metrics.BUCKETS:
        running += durations.get(str(le), 0)
        buckets.append((str(le), running))
    buckets.append(("+Inf", running + durations.get("+Inf", 0)))
    yield HistogramMetricFamily(
        "agentstate_step_duration_seconds",
        "Time a step took, from claim to persisted checkpoint.",
        buckets=buckets,
        sum_value=durations.get("sum", 0.0),
    )
    steps = CounterMetricFamily(
        "agentstate_step_attempts", "Step attempts by outcome.", labels=["outcome"]
    )
    for outcome in ("succeeded", "retrying", "failed"):
        steps.add_metric([outcome], stored["steps"].get(outcome, 0))
    yield steps
    yield CounterMetricFamily(
        "agentstate_step_retries",
        "Failed step attempts that will be retried.",
        value=stored["steps"].get("retrying", 0),
    )
    sweeps = CounterMetricFamily(
        "agentstate_sweep_runs", "Runs touched by beat sweeps.", labels=["sweep", "what"]
    )
    for field, n in sorted(stored["sweeps"].items()):
        sweep, _, what = field.partition(":")
        if what:
            sweeps.add_metric([sweep, what], n)
    yield sweeps
    yield from _recovery_metrics(stored)


def _recovery_metrics(stored: dict[str, dict[str, float]]) -> Iterator[Metric]:
    recovery = stored["recovery"]
    buckets, running = [], 0.0
    for le in engine_metrics.BUCKETS:
        running += recovery.get(str(le), 0)
        buckets.append((str(le), running))
    buckets.append(("+Inf", running + recovery.get("+Inf", 0)))
    yield HistogramMetricFamily(
        "agentstate_recovery_seconds",
        "From when a lost worker missed its liveness beat to its run being claimed again.",
        buckets=buckets,
        sum_value=recovery.get("sum_ms", 0.0) / 1000,
    )
    lost = CounterMetricFamily(
        "agentstate_lost_attempts", "Attempts lost with their worker, by host.", labels=["host"]
    )
    for host, n in sorted(stored["lost"].items()):
        lost.add_metric([host], n)
    yield lost
    yield CounterMetricFamily(
        "agentstate_leases_broken_early",
        "Runs taken back from a dead worker before its lease expired (liveness).",
        value=stored["sweeps"].get("leases_broken_early", 0),
    )


def _may_scrape(request: HttpRequest) -> bool:
    # Closed unless configured: the counts name tenants' workloads, not a public matter.
    token = settings.AGENTSTATE_METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        return True
    return request.META.get("REMOTE_ADDR") in settings.AGENTSTATE_METRICS_ALLOWED_IPS


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition, for a scraper with the token or from an allowed address."""
    if not _may_scrape(request):
        return HttpResponse(
            "Forbidden: send the AGENTSTATE_METRICS_TOKEN as a Bearer token, or scrape from an"
            " address in AGENTSTATE_METRICS_ALLOWED_IPS.\n",
            status=403,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


ROUTES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class OpsMiddleware:
    """Answer the operations endpoints before sessions and the request transaction."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = ROUTES.get(request.path_info.rstrip("/") or "/")
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
        response = view(request)
        response["Cache-Control"] = "no-store"
        return response
