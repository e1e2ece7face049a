"""Signed webhooks for what happens to threads run elsewhere: a manager's decision on a
LangGraph `interrupt()` is POSTed to the tenant's endpoints, so the graph's process resumes
when told instead of polling `/langgraph/decision`.

A delivery is a row written in the transaction that decided (nothing is sent for a decision
that rolled back), sent once that transaction commits, and tried again with backoff until the
endpoint answers 2xx: by the task itself and, should its message be lost, by the beat sweep.
At least once: the receiver drops a repeat by the `AgentState-Delivery` header. The body is
signed like Stripe's: `AgentState-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of
"<t>.<body>" with the endpoint's secret>` (`agentstate_client.webhooks.verify` checks it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import secrets
import time
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.runtime.models import (
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEndpoint,
)
from tenants.audit import audit_record
from tenants.principal import Principal
from tenants.scope import system_scope, tenant_scope

logger = logging.getLogger(__name__)

DECISION = "langgraph.decision"
EVENTS = (DECISION,)
SIGNATURE_HEADER = "AgentState-Signature"
TASK = "agents.deliver_webhook"  # agents/runtime/tasks.py
# A delivery that never answers 2xx is given up after this many tries (about a day).
BACKOFF_CAP_SECONDS = 3600


# --- endpoints ------------------------------------------------------------------------------------


@transaction.atomic
def webhook_endpoint_create(
    *, principal: Principal, url: str, events: list[str], description: str = ""
) -> WebhookEndpoint:
    """A new endpoint with a fresh secret (the caller shows it once)."""
    endpoint = WebhookEndpoint.objects.create(
        tenant=principal.tenant,
        url=url,
        secret="whsec_" + secrets.token_hex(24),
        events=sorted(set(events)),
        description=description,
        created_by_label=principal.label[:200],
    )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="webhook.created",
        target=endpoint,
        after={"url": url, "events": endpoint.events},
    )
    return endpoint


@transaction.atomic
def webhook_endpoint_disable(*, principal: Principal, endpoint: WebhookEndpoint) -> None:
    """Stop sending to an endpoint; what it was sent stays listed."""
    if endpoint.disabled_at is not None:
        return
    WebhookEndpoint.objects.for_tenant(principal.tenant).filter(pk=endpoint.pk).update(
        disabled_at=timezone.now()
    )
    WebhookDelivery.objects.for_tenant(principal.tenant).filter(
        endpoint=endpoint, status=WebhookDeliveryStatus.PENDING
    ).update(status=WebhookDeliveryStatus.FAILED, last_error="endpoint disabled")
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="webhook.disabled",
        target=endpoint,
        before={"url": endpoint.url},
    )


# --- events ---------------------------------------------------------------------------------------


def decision_made(*, tenant_id: Any, run: Any, decision: dict[str, Any]) -> int:
    """A person decided on an external thread's interrupt: one delivery per endpoint that
    listens, written in the caller's transaction and sent once it commits."""
    thread = dict(run.input or {})
    payload = {
        "event": DECISION,
        "thread_id": thread.get("thread_id", ""),
        "checkpoint_ns": thread.get("checkpoint_ns", ""),
        "run_id": str(run.pk),
        "request_id": decision.get("request_id"),
        "decision": decision,
    }
    return _emit(tenant_id, DECISION, f"decision:{decision.get('request_id')}", payload)


def _emit(tenant_id: Any, event: str, key: str, payload: dict[str, Any]) -> int:
    endpoints = WebhookEndpoint.objects.for_tenant(tenant_id).filter(
        disabled_at__isnull=True, events__contains=[event]
    )
    made = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                tenant_id=tenant_id, endpoint=e, event=event, event_key=key, payload=payload
            )
            for e in endpoints
        ],
        ignore_conflicts=True,  # the same event again (a retried request) is sent once
    )
    ids = [str(d.pk) for d in made]
    if ids:
        transaction.on_commit(lambda: _enqueue(str(tenant_id), ids))
    return len(ids)


def _enqueue(tenant_id: str, ids: list[str], *, countdown: float = 0) -> None:
    for delivery_id in ids:
        try:
            current_app.send_task(
                TASK,
                kwargs={"tenant_id": tenant_id, "delivery_id": delivery_id},
                countdown=countdown,
            )
        except Exception:  # noqa: BLE001 - the broker is away: the sweep sends it
            logger.warning("webhook %s not queued; the sweep will send it", delivery_id)


# --- sending ------------------------------------------------------------------------------------


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The signature header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def webhook_deliver(*, tenant_id: Any, delivery_id: Any) -> str:
    """Try one delivery now if it is due (claimed with a conditional UPDATE, so two workers
    never send the same try); the status it is left in."""
    lease = dt.timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS * 3)
    with tenant_scope(tenant_id):
        now = timezone.now()
        claimed = (
            WebhookDelivery.objects.for_tenant(tenant_id)
            .filter(
                pk=delivery_id,
                status=WebhookDeliveryStatus.PENDING,
                next_attempt_at__lte=now,
            )
            .update(next_attempt_at=now + lease, attempts=F("attempts") + 1)
        )
        if not claimed:
            return "not_due"
        delivery = (
            WebhookDelivery.objects.for_tenant(tenant_id)
            .select_related("endpoint")
            .get(pk=delivery_id)
        )
    code, error = _post(delivery)  # outside any transaction: the endpoint may be slow
    with tenant_scope(tenant_id):
        return _record(delivery, code, error)


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    body = json.dumps(
        {**delivery.payload, "delivery_id": str(delivery.pk), "attempt": delivery.attempts},
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentState-Webhooks/1",
        "AgentState-Event": delivery.event,
        "AgentState-Delivery": str(delivery.pk),
        SIGNATURE_HEADER: sign(delivery.endpoint.secret, body, int(time.time())),
    }
    import httpx  # a tenth of a second to import: only the process that delivers pays it

    try:
        answer = httpx.post(
            delivery.endpoint.url,
            content=body,
            headers=headers,
            timeout=settings.WEBHOOK_TIMEOUT_SECONDS,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    return answer.status_code, "" if answer.is_success else answer.text[:200]


def _record(delivery: WebhookDelivery, code: int | None, error: str) -> str:
    rows = WebhookDelivery.objects.for_tenant(delivery.tenant_id).filter(
        pk=delivery.pk, status=WebhookDeliveryStatus.PENDING
    )
    now = timezone.now()
    if code is not None and 200 <= code < 300:
        rows.update(
            status=WebhookDeliveryStatus.DELIVERED,
            delivered_at=now,
            last_status_code=code,
            last_error="",
        )
        return WebhookDeliveryStatus.DELIVERED
    if delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        rows.update(status=WebhookDeliveryStatus.FAILED, last_status_code=code, last_error=error)
        logger.warning("webhook %s failed after %d tries", delivery.pk, delivery.attempts)
        return WebhookDeliveryStatus.FAILED
    wait = min(BACKOFF_CAP_SECONDS, 2 ** min(delivery.attempts, 12))
    rows.update(
        next_attempt_at=now + dt.timedelta(seconds=wait), last_status_code=code, last_error=error
    )
    return WebhookDeliveryStatus.PENDING


def webhooks_send_due(*, limit: int = 500) -> int:
    """Beat: queue every delivery whose try is due, whatever became of its task's message
    (a try already under way holds a lease, so a second message finds it not due)."""
    with system_scope("webhook_sweep"):
        rows = list(
            WebhookDelivery.objects.filter(
                status=WebhookDeliveryStatus.PENDING, next_attempt_at__lte=timezone.now()
            ).values_list("tenant_id", "pk")[:limit]
        )
    for tenant_id, delivery_id in rows:
        _enqueue(str(tenant_id), [str(delivery_id)])
    return len(rows)


def webhook_send_later(*, tenant_id: Any, delivery_id: Any) -> None:
    """Queue a pending delivery's next try for when it is due (the sweep is the safety net)."""
    with tenant_scope(tenant_id):
        due = (
            WebhookDelivery.objects.for_tenant(tenant_id)
            .filter(pk=delivery_id, status=WebhookDeliveryStatus.PENDING)
            .values_list("next_attempt_at", flat=True)
            .first()
        )
    if due is not None:
        wait = max(0.0, (due - timezone.now()).total_seconds())
        _enqueue(str(tenant_id), [str(delivery_id)], countdown=wait)
