"""Retention sweeps with a controlled clock: expired facts, conversations, checkpoints."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memory.facts import retention, services
from memory.models import MemoryFact
from tenants.models import AuditEvent
from tenants.scope import system_scope, tenant_scope
from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db
LATER = dt.timedelta(days=31)


@pytest.fixture
def thirty_day_preferences(members):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="preference", ttl_days=30)


def test_expired_facts_are_hard_deleted_in_batches_with_their_history(
    members, thirty_day_preferences
):
    ada = members["member"]
    remember(ada, "Prefers phone", key="contact.channel")
    remember(ada, "Prefers email", key="contact.channel")
    for n in range(5):
        remember(ada, f"Likes colour {n}")
    keep = remember(ada, "Works as a nurse", category="profile")  # no TTL for profiles
    assert retention.purge_expired_facts(now=timezone.now() + dt.timedelta(days=29)) == 0
    deleted = retention.purge_expired_facts(now=timezone.now() + LATER, batch=2)
    assert deleted == 7
    assert [f.pk for f in facts_of(ada)] == [keep.pk]


def test_each_sweep_batch_records_its_counts_in_the_audit_log(members, thirty_day_preferences):
    remember(members["member"], "Likes tea")
    retention.purge_expired_facts(now=timezone.now() + LATER)
    with system_scope("test_inspection"):
        event = AuditEvent.objects.filter(action="system.memory_ttl_sweep").first()
    assert event is not None and event.after["deleted"] == 1
    assert event.after["by_tenant"] == {str(members["member"].tenant_id): 1}


def test_a_refreshed_fact_lives_on_from_its_refresh(members, thirty_day_preferences):
    ada = members["member"]
    fact = remember(ada, "Likes tea")
    with tenant_scope(ada.tenant_id):
        MemoryFact.objects.filter(pk=fact.pk).update(
            expires_at=timezone.now() + dt.timedelta(days=1)
        )
    remember(ada, "likes tea")  # said again: the clock restarts
    assert retention.purge_expired_facts(now=timezone.now() + dt.timedelta(days=2)) == 0


def test_conversations_past_retention_go_with_their_transcripts(members):
    from agents.runtime.models import AgentSession, Message

    ada = members["member"]
    with tenant_scope(ada.tenant_id):
        old = AgentSession.objects.create(tenant_id=ada.tenant_id, user=ada.user, agent="x")
        Message.objects.create(
            tenant_id=ada.tenant_id, session=old, seq=1, role="user", content="a"
        )
        recent = AgentSession.objects.create(tenant_id=ada.tenant_id, user=ada.user, agent="x")
        AgentSession.objects.filter(pk=old.pk).update(
            updated_at=timezone.now() - dt.timedelta(days=91)
        )
    assert retention.purge_old_sessions() == 1
    with tenant_scope(ada.tenant_id):
        assert list(AgentSession.objects.values_list("pk", flat=True)) == [recent.pk]
        assert Message.objects.count() == 0


def test_checkpoints_of_runs_finished_a_week_ago_go_and_others_stay(members):
    from agents.runtime.models import Checkpoint, Run

    ada = members["member"]
    with tenant_scope(ada.tenant_id):
        runs = {}
        for name, status, age in [
            ("old_done", "succeeded", 8),
            ("new_done", "succeeded", 6),
            ("old_waiting", "waiting_approval", 30),
        ]:
            run = Run.objects.create(
                tenant_id=ada.tenant_id,
                agent="x",
                agent_version=1,
                current_step="s",
                status=status,
                finished_at=timezone.now() - dt.timedelta(days=age)
                if status == "succeeded"
                else None,
            )
            Checkpoint.objects.create(
                tenant_id=ada.tenant_id, run=run, seq=1, step="s", state={}, schema_version=1
            )
            runs[name] = run.pk
    assert retention.purge_old_checkpoints() == 1
    with tenant_scope(ada.tenant_id):
        left = set(Checkpoint.objects.values_list("run_id", flat=True))
    assert left == {runs["new_done"], runs["old_waiting"]}


def test_a_langgraph_threads_checkpoints_are_its_state_and_outlive_checkpoint_retention(members):
    from agents.runtime.models import Checkpoint, Run

    ada = members["member"]
    with tenant_scope(ada.tenant_id):
        run = Run.objects.create(
            tenant_id=ada.tenant_id,
            agent="langgraph",  # agents/runtime/external.py: kept by conversation retention
            agent_version=1,
            current_step="external",
            status="succeeded",
            finished_at=timezone.now() - dt.timedelta(days=30),
        )
        Checkpoint.objects.create(
            tenant_id=ada.tenant_id, run=run, seq=1, step="loop 0", state={}, schema_version=1
        )
    assert retention.purge_old_checkpoints() == 0
    with tenant_scope(ada.tenant_id):
        assert Checkpoint.objects.filter(run=run).count() == 1


def test_the_beat_sweep_runs_every_retention_job_including_idempotency(members):
    counts = retention.sweep_all()
    assert set(counts) == {"facts", "sessions", "checkpoints", "idempotency"}
