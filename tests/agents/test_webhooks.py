"""Signed webhooks on decisions about LangGraph threads: written with the decision, sent after
it commits, signed with the endpoint's secret, tried again until the endpoint answers 2xx,
and managed by admins only."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import time
from typing import Any

import pytest
from agentstate_client.webhooks import InvalidSignature, verify
from django.test import Client
from django.utils import timezone

from agents.runtime import webhooks
from agents.runtime.models import AgentSession, Run, WebhookDelivery, WebhookEndpoint
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.sdk.test_langgraph_door_access import put_checkpoint, put_interrupt

pytestmark = pytest.mark.django_db


class Receiver:
    """A local HTTP endpoint that answers each POST with the next status of `answers`
    (then 200) and keeps what it was sent."""

    def __init__(self, answers: list[int] | None = None) -> None:
        self.answers = list(answers or [])
        self.received: list[dict[str, Any]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"headers": dict(self.headers), "body": body})
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(answers: list[int] | None = None) -> Receiver:
        made.append(Receiver(answers))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def sent(monkeypatch):
    """Deliveries queued for the worker (in-process tests send them by hand)."""
    queued: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "agents.runtime.webhooks.current_app.send_task",
        lambda name, kwargs=None, countdown=0, **_: (
            queued.append({**kwargs, "countdown": countdown}) if name == webhooks.TASK else None
        ),
    )
    return queued


def endpoint(tenant, url: str, **extra: Any) -> WebhookEndpoint:
    admin = factories.principal_for(factories.make_member(tenant, "admin"))
    with tenant_scope(tenant.pk):
        return webhooks.webhook_endpoint_create(
            principal=admin, url=url, events=[webhooks.DECISION], **extra
        )


def waiting_graph(tenant, thread: str = "t-1") -> ApprovalRequest:
    key = Client(HTTP_AUTHORIZATION=f"Bearer {factories.make_api_key(tenant, ['write']).raw}")
    assert put_checkpoint(key, thread).status_code == 201
    assert put_interrupt(key, thread, {"action": "refund", "arguments": {}}).status_code == 204
    with tenant_scope(tenant.pk):
        return ApprovalRequest.objects.get(run__session__title=thread)


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    """A manager decides; what the decision queues on commit is queued."""

    def make(tenant, request: ApprovalRequest, approve: bool = True) -> None:
        manager = factories.principal_for(factories.make_member(tenant, "manager"))
        with django_capture_on_commit_callbacks(execute=True), tenant_scope(tenant.pk):
            approval_decide(principal=manager, request=request, approve=approve, comment="fine")

    return make


def deliveries(tenant) -> list[WebhookDelivery]:
    with tenant_scope(tenant.pk):
        return list(WebhookDelivery.objects.order_by("created_at"))


def test_a_decision_is_posted_signed_to_each_listening_endpoint(
    tenant_a, tenant_b, receiver, sent, decide
):
    hooks = receiver()
    listening = endpoint(tenant_a, hooks.url)
    off = endpoint(tenant_a, hooks.url)
    with tenant_scope(tenant_a.pk):
        WebhookEndpoint.objects.filter(pk=off.pk).update(disabled_at=timezone.now())
    endpoint(tenant_b, hooks.url)  # another tenant's endpoint hears nothing of tenant A
    request = waiting_graph(tenant_a)

    decide(tenant_a, request)
    [delivery] = deliveries(tenant_a)
    assert [q["delivery_id"] for q in sent] == [str(delivery.pk)]
    status = webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk)

    assert status == "delivered" and delivery.endpoint_id == listening.pk
    [got] = hooks.received
    event = verify(listening.secret, got["body"], got["headers"]["AgentState-Signature"])
    assert event["event"] == "langgraph.decision" and event["thread_id"] == "t-1"
    assert event["decision"]["approved"] is True and event["decision"]["comment"] == "fine"
    assert event["request_id"] == str(request.pk) and event["delivery_id"] == str(delivery.pk)
    assert got["headers"]["AgentState-Delivery"] == str(delivery.pk)
    with pytest.raises(InvalidSignature):
        verify(off.secret, got["body"], got["headers"]["AgentState-Signature"])
    with pytest.raises(InvalidSignature):
        verify(listening.secret, got["body"] + b" ", got["headers"]["AgentState-Signature"])
    with tenant_scope(tenant_b.pk):
        assert not WebhookDelivery.objects.exists()


def test_a_failed_try_is_tried_again_after_a_backoff_until_the_endpoint_answers(
    tenant_a, receiver, sent, decide
):
    hooks = receiver([500, 503])
    endpoint(tenant_a, hooks.url)
    decide(tenant_a, waiting_graph(tenant_a))
    [delivery] = deliveries(tenant_a)

    def try_now() -> str:
        with tenant_scope(tenant_a.pk):
            WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        return webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk)

    first = webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk)
    [after_first] = deliveries(tenant_a)
    too_soon = webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk)
    second, third = try_now(), try_now()

    assert (first, too_soon, second, third) == ("pending", "not_due", "pending", "delivered")
    assert after_first.last_status_code == 500 and after_first.attempts == 1
    assert after_first.next_attempt_at > timezone.now()
    [done] = deliveries(tenant_a)
    assert done.attempts == 3 and done.status == "delivered" and len(hooks.received) == 3
    bodies = [json.loads(r["body"]) for r in hooks.received]
    assert {b["delivery_id"] for b in bodies} == {str(delivery.pk)}


def test_a_delivery_is_given_up_after_the_last_try(tenant_a, receiver, sent, settings, decide):
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    hooks = receiver([500, 500, 500])
    endpoint(tenant_a, hooks.url)
    decide(tenant_a, waiting_graph(tenant_a))
    [delivery] = deliveries(tenant_a)
    for _ in range(2):
        with tenant_scope(tenant_a.pk):
            WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        last = webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk)
    assert last == "failed" and deliveries(tenant_a)[0].status == "failed"


def test_an_unreachable_endpoint_is_a_pending_try_not_an_error(tenant_a, sent, decide):
    endpoint(tenant_a, "http://127.0.0.1:9/nobody-listens")
    decide(tenant_a, waiting_graph(tenant_a))
    [delivery] = deliveries(tenant_a)
    assert webhooks.webhook_deliver(tenant_id=tenant_a.pk, delivery_id=delivery.pk) == "pending"
    assert "ConnectError" in deliveries(tenant_a)[0].last_error


def test_the_sweep_queues_the_deliveries_that_are_due(tenant_a, receiver, sent, decide):
    endpoint(tenant_a, receiver().url)
    decide(tenant_a, waiting_graph(tenant_a))
    sent.clear()  # the message of the decision was lost
    [delivery] = deliveries(tenant_a)
    assert webhooks.webhooks_send_due() == 1
    assert [q["delivery_id"] for q in sent] == [str(delivery.pk)]


def test_a_native_runs_decision_sends_no_webhook(tenant_a, receiver, sent, members, decide):
    from tests.agents.test_api import waiting_for_approval

    endpoint(tenant_a, receiver().url)
    run = waiting_for_approval(members["member"])
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.get(run=run)
    decide(tenant_a, request)
    assert deliveries(tenant_a) == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_delivers_the_decision_and_retries_a_failing_endpoint(
    tenant_a, receiver, cluster, decide
):
    hooks = receiver([502])
    secret = endpoint(tenant_a, hooks.url).secret
    cluster.worker("hooks")
    decide(tenant_a, waiting_graph(tenant_a))

    deadline = time.monotonic() + 30
    while len(hooks.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)

    assert len(hooks.received) == 2  # 502, then 2 s later 200
    last = hooks.received[-1]
    assert verify(secret, last["body"], last["headers"]["AgentState-Signature"])["attempt"] == 2
    deadline = time.monotonic() + 10
    while deliveries(tenant_a)[0].status != "delivered" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert deliveries(tenant_a)[0].status == "delivered"


# --- who manages endpoints ----------------------------------------------------------------------

URL = "/api/v1/webhooks"


@pytest.mark.parametrize(
    "who,status", [("admin", 201), ("manager", 403), ("member", 403), ("viewer", 403)]
)
def test_only_admins_add_endpoints_and_the_secret_is_shown_once(client_for, tenant_a, who, status):
    client = client_for(who)
    made = client.post(URL, {"url": "https://graphs.example/hooks"}, "application/json")
    assert made.status_code == status, made.content
    assert client.get(URL).status_code == (200 if who == "admin" else 403)
    if status == 201:
        body = made.json()
        assert body["secret"].startswith("whsec_") and body["events"] == ["langgraph.decision"]
        [listed] = client.get(URL).json()
        assert "secret" not in listed and listed["active"] is True
        with tenant_scope(tenant_a.pk):
            assert AuditEvent.objects.filter(action="webhook.created").count() == 1


@pytest.mark.parametrize("scopes,status", [(["admin"], 201), (["read", "write", "approve"], 403)])
def test_keys_need_the_admin_scope(tenant_a, scopes, status):
    key = factories.make_api_key(tenant_a, scopes).raw
    made = Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        URL, {"url": "https://graphs.example/hooks"}, "application/json"
    )
    assert made.status_code == status


def test_an_admin_disables_an_endpoint_and_the_outsider_cannot(client_for, tenant_a):
    made = endpoint(tenant_a, "https://graphs.example/hooks")
    assert client_for("outsider").delete(f"{URL}/{made.pk}").status_code == 404
    assert client_for("outsider").get(f"{URL}/{made.pk}/deliveries").status_code == 404
    assert client_for("admin").delete(f"{URL}/{made.pk}").status_code == 204
    assert client_for("admin").get(URL).json()[0]["active"] is False
    assert client_for("admin").get(f"{URL}/{made.pk}/deliveries").json() == []


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://graphs.example/hooks"},
        {"url": "not a url"},
        {"url": "https://x.example", "events": ["run.finished"]},
        {"url": "https://x.example", "events": []},
        {"url": "https://x.example/" + "a" * 600},
        {},
    ],
)
def test_a_bad_endpoint_is_400_and_nothing_is_made(client_for, tenant_a, body):
    response = client_for("admin").post(URL, body, "application/json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    with tenant_scope(tenant_a.pk):
        assert not WebhookEndpoint.objects.exists()


def test_deliveries_and_sessions_stay_in_their_tenant(tenant_a, tenant_b, sent, decide):
    endpoint(tenant_a, "http://127.0.0.1:9/x")
    decide(tenant_a, waiting_graph(tenant_a))
    with tenant_scope(tenant_b.pk):
        assert not WebhookDelivery.objects.exists() and not WebhookEndpoint.objects.exists()
        assert not AgentSession.objects.exists() and not Run.objects.exists()
    assert dt.timedelta(0) <= timezone.now() - deliveries(tenant_a)[0].created_at
