"""Test data. Every tenant-owned model has a factory here (a test checks that)."""

from __future__ import annotations

import functools
import itertools
import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from tenants import services
from tenants.models import ApiKey, AuditEvent, Invitation, Membership, Role, Tenant
from tenants.principal import Principal
from tenants.scope import system_scope, tenant_scope

_seq = itertools.count(1)
PASSWORD = "correct horse battery staple"


def make_tenant(slug: str | None = None) -> Tenant:
    slug = slug or f"t{next(_seq)}-{uuid.uuid4().hex[:6]}"
    return services.tenant_create(slug=slug, name=slug.title(), actor_label="test")


def make_user(username: str | None = None):
    username = username or f"user{next(_seq)}"
    user = get_user_model()(username=username, password=_hashed(tuple(settings.PASSWORD_HASHERS)))
    user.save()
    return user


@functools.cache
def _hashed(hashers: tuple[str, ...]) -> str:
    """PASSWORD hashed once per process and hasher setting. The browser tests keep the real
    hasher (their server checks the password), whose PBKDF2 takes 0.6 s of CPU a hash here,
    and they make users by the hundred; the users share a salt, which no test minds."""
    return make_password(PASSWORD)


def make_member(tenant: Tenant, role: str = Role.MEMBER, user=None) -> Membership:
    return services.membership_add(tenant=tenant, user=user or make_user(), role=role)


def principal_for(membership: Membership) -> Principal:
    return Principal.for_member(
        tenant=membership.tenant, user=membership.user, role=membership.role
    )


def make_api_key(tenant: Tenant, scopes: list[str] | None = None):
    admin = make_member(tenant, Role.ADMIN)
    with tenant_scope(tenant.pk):
        return services.api_key_create(
            actor=principal_for(admin), name="test key", scopes=scopes or ["read"]
        )


def make_personal_token(membership: Membership, *, write: bool = True, expires_in_days=None):
    """A person's own MCP token (tenants/personal_tokens.py), as their privacy page makes it."""
    from tenants import personal_tokens

    with tenant_scope(membership.tenant_id):
        return personal_tokens.token_create(
            actor=principal_for(membership),
            name="my assistant",
            write=write,
            expires_in_days=expires_in_days,
        )


# --- one row of each tenant-owned table, created through the ORM with no checks of its own,
# so that only row-level security can refuse a row for the wrong tenant. ---------------------


def _membership_row(tenant: Tenant) -> Membership:
    return Membership.objects.create(tenant=tenant, user=make_user(), role=Role.VIEWER)


def _api_key_row(tenant: Tenant) -> ApiKey:
    return ApiKey.objects.create(
        tenant=tenant, name="row", prefix="x", key_hash=uuid.uuid4().hex, scopes=["read"]
    )


def _audit_row(tenant: Tenant) -> AuditEvent:
    return AuditEvent.objects.create(tenant=tenant, actor_label="test", action="test.row")


def _invitation_row(tenant: Tenant) -> Invitation:
    from django.utils import timezone

    return Invitation.objects.create(
        tenant=tenant,
        email=f"{uuid.uuid4().hex[:8]}@example.com",
        role=Role.MEMBER,
        token_hash=uuid.uuid4().hex,
        sent_at=timezone.now(),
        expires_at=timezone.now(),
    )


def _tenant_row(tenant: Tenant) -> Tenant:
    return tenant


def _session_row(tenant: Tenant):
    from agents.runtime.models import AgentSession

    return AgentSession.objects.create(tenant=tenant, agent="refund_desk")


def _run_row(tenant: Tenant):
    from agents.runtime.models import Run

    return Run.objects.create(
        tenant=tenant, agent="refund_desk", agent_version=1, current_step="lookup"
    )


def _message_row(tenant: Tenant):
    from agents.runtime.models import Message

    return Message.objects.create(
        tenant=tenant, session=_session_row(tenant), seq=1, role="user", content="hi"
    )


def _checkpoint_row(tenant: Tenant):
    from agents.runtime.models import Checkpoint

    return Checkpoint.objects.create(
        tenant=tenant, run=_run_row(tenant), seq=1, step="s", state={}, schema_version=1
    )


def _attempt_row(tenant: Tenant):
    from django.utils import timezone

    from agents.runtime.models import StepAttempt

    now = timezone.now()
    return StepAttempt.objects.create(
        tenant=tenant,
        run=_run_row(tenant),
        seq=1,
        attempt=1,
        step="s",
        started_at=now,
        ended_at=now,
        outcome="retrying",
    )


def _tool_call_row(tenant: Tenant):
    from agents.runtime.models import ToolCall

    return ToolCall.objects.create(
        tenant=tenant,
        run=_run_row(tenant),
        seq=1,
        call_index=0,
        tool="t",
        idempotency_key=uuid.uuid4().hex,
        status="intent",
    )


def _external_checkpoint_row(tenant: Tenant):
    from agents.runtime.models import ExternalCheckpoint

    shown = _checkpoint_row(tenant)
    return ExternalCheckpoint.objects.create(
        tenant=tenant,
        shown_as=shown,
        run_id=shown.run_id,
        thread_id=uuid.uuid4().hex,
        checkpoint_id="1",
        type="json",
        blob=b"{}",
    )


def _external_blob_row(tenant: Tenant):
    from agents.runtime.models import ExternalBlob

    return ExternalBlob.objects.create(
        tenant=tenant,
        run=_run_row(tenant),
        thread_id=uuid.uuid4().hex,
        channel="c",
        version="1",
        type="json",
        blob=b"1",
    )


def _external_write_row(tenant: Tenant):
    from agents.runtime.models import ExternalWrite

    return ExternalWrite.objects.create(
        tenant=tenant,
        run=_run_row(tenant),
        thread_id=uuid.uuid4().hex,
        checkpoint_id="1",
        task_id="t",
        idx=0,
        channel="c",
        type="json",
        blob=b"1",
    )


def _webhook_endpoint_row(tenant: Tenant):
    from agents.runtime.models import WebhookEndpoint

    return WebhookEndpoint.objects.create(
        tenant=tenant, url="https://hooks.example/x", secret="s", events=["langgraph.decision"]
    )


def _webhook_delivery_row(tenant: Tenant):
    from agents.runtime.models import WebhookDelivery

    return WebhookDelivery.objects.create(
        tenant=tenant,
        endpoint=_webhook_endpoint_row(tenant),
        event="langgraph.decision",
        event_key=uuid.uuid4().hex,
    )


def _graph_interrupt_row(tenant: Tenant):
    from agents.runtime.models import GraphInterrupt

    return GraphInterrupt.objects.create(
        tenant=tenant, run=_run_row(tenant), interrupt_id="i", checkpoint_id="1", task_id="t"
    )


def _run_count_row(tenant: Tenant):
    from agents.runtime.models import RunCount

    return RunCount.objects.create(tenant=tenant, status="queued", n=0)


def _stuck_count_row(tenant: Tenant):
    from django.utils import timezone

    from agents.runtime.models import StuckCount

    return StuckCount.objects.create(
        tenant=tenant, reason="lease_expired", n=1, counted_at=timezone.now()
    )


def _idempotency_row(tenant: Tenant):
    from django.utils import timezone

    from tenants.models import IdempotencyRecord

    return IdempotencyRecord.objects.create(
        tenant=tenant,
        key=uuid.uuid4().hex,
        fingerprint="f",
        status="started",
        expires_at=timezone.now(),
    )


def _run_event_row(tenant: Tenant):
    from agents.runtime.models import RunEvent

    return RunEvent.objects.create(tenant=tenant, run=_run_row(tenant), seq=1, kind="run.queued")


def _run_event_log_rows(tenant: Tenant):
    """Rows of both halves of the agents_runevent_log view: an event row and a checkpoint
    carrying its step.finished event. Returns the run."""
    from agents.runtime.models import Checkpoint, RunEvent

    run = _run_row(tenant)
    RunEvent.objects.create(tenant=tenant, run=run, seq=1, kind="step.started")
    Checkpoint.objects.create(
        tenant=tenant,
        run=run,
        seq=1,
        step="s",
        state={},
        schema_version=1,
        attempt=1,
        event_seq=2,
        status="running",
    )
    return run


def _packed_context_row(tenant: Tenant):
    from agents.runtime.models import PackedContext

    return PackedContext.objects.create(
        tenant=tenant,
        run=_run_row(tenant),
        seq=1,
        step="s",
        encoding="cl100k_base",
        budget=100,
        tokens_used=10,
    )


def _approval_row(tenant: Tenant):
    from approvals.models import ApprovalRequest

    return ApprovalRequest.objects.create(
        tenant=tenant, run=_run_row(tenant), checkpoint_seq=1, step="s", action="refund"
    )


def _approval_policy_row(tenant: Tenant):
    from approvals.models import ApprovalPolicy

    return ApprovalPolicy.objects.create(tenant=tenant, action=f"act-{uuid.uuid4().hex[:8]}")


def _approver_group_row(tenant: Tenant):
    from approvals.models import ApproverGroup

    return ApproverGroup.objects.create(tenant=tenant, name=f"group-{uuid.uuid4().hex[:8]}")


def _approver_group_member_row(tenant: Tenant):
    from approvals.models import ApproverGroupMember

    return ApproverGroupMember.objects.create(
        tenant=tenant, group=_approver_group_row(tenant), user=make_user()
    )


def _memory_fact_row(tenant: Tenant):
    from django.utils import timezone

    from memory.models import MemoryFact

    return MemoryFact.objects.create(
        tenant=tenant,
        subject=make_user(),
        category="preference",
        text="Prefers email",
        normalized="prefers email",
        source_kind="user",
        valid_from=timezone.now(),
    )


def _memory_policy_row(tenant: Tenant):
    from memory.models import MemoryPolicy

    return MemoryPolicy.objects.create(tenant=tenant, category=f"c{uuid.uuid4().hex[:8]}")


def _memory_settings_row(tenant: Tenant):
    from memory.models import MemorySettings

    return MemorySettings.objects.create(tenant=tenant)


def _privacy_link_use_row(tenant: Tenant):
    from memory.models import PrivacyLinkUse

    return PrivacyLinkUse.objects.create(tenant=tenant, subject=make_user(), nonce=uuid.uuid4().hex)


TENANT_OWNED_ROWS = {
    Tenant: _tenant_row,
    Membership: _membership_row,
    ApiKey: _api_key_row,
    AuditEvent: _audit_row,
    Invitation: _invitation_row,
    **{
        model: factory
        for model, factory in [
            ("agents.AgentSession", _session_row),
            ("agents.Run", _run_row),
            ("agents.Message", _message_row),
            ("agents.Checkpoint", _checkpoint_row),
            ("agents.StepAttempt", _attempt_row),
            ("agents.ToolCall", _tool_call_row),
            ("tenants.IdempotencyRecord", _idempotency_row),
            ("agents.RunEvent", _run_event_row),
            ("agents.RunEventLog", _run_event_log_rows),
            ("agents.PackedContext", _packed_context_row),
            ("agents.ExternalCheckpoint", _external_checkpoint_row),
            ("agents.ExternalBlob", _external_blob_row),
            ("agents.ExternalWrite", _external_write_row),
            ("agents.WebhookEndpoint", _webhook_endpoint_row),
            ("agents.WebhookDelivery", _webhook_delivery_row),
            ("agents.GraphInterrupt", _graph_interrupt_row),
            ("agents.RunCount", _run_count_row),
            ("agents.StuckCount", _stuck_count_row),
            ("approvals.ApprovalRequest", _approval_row),
            ("approvals.ApprovalPolicy", _approval_policy_row),
            ("approvals.ApproverGroup", _approver_group_row),
            ("approvals.ApproverGroupMember", _approver_group_member_row),
            ("memory.MemoryFact", _memory_fact_row),
            ("memory.MemoryPolicy", _memory_policy_row),
            ("memory.MemorySettings", _memory_settings_row),
            ("memory.PrivacyLinkUse", _privacy_link_use_row),
        ]
    },
}


def row_factory(model):
    return TENANT_OWNED_ROWS.get(model) or TENANT_OWNED_ROWS.get(model._meta.label)


def make_row(model, tenant: Tenant):
    with tenant_scope(tenant.pk):
        return row_factory(model)(tenant)


def all_tenants() -> list[Tenant]:
    with system_scope("test_inspection"):
        return list(Tenant.objects.all())
