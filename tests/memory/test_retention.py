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


def test_runs_started_without_a_conversation_go_after_the_conversation_retention(members, tenant_b):
    from agents.runtime.models import AgentSession, Checkpoint, Run

    ada = members["member"]
    now = timezone.now()

    def run(tenant_id, status, age_days, session=None):
        made = Run.objects.create(
            tenant_id=tenant_id,
            agent="x",
            agent_version=1,
            current_step="s",
            status=status,
            session=session,
            finished_at=now - dt.timedelta(days=age_days) if status != "running" else None,
        )
        Run.objects.filter(pk=made.pk).update(created_at=now - dt.timedelta(days=age_days + 1))
        Checkpoint.objects.create(
            tenant_id=tenant_id, run=made, seq=1, step="s", state={}, schema_version=1
        )
        return made.pk

    with tenant_scope(ada.tenant_id):
        session = AgentSession.objects.create(tenant_id=ada.tenant_id, user=ada.user, agent="x")
        old = run(ada.tenant_id, "succeeded", 91)
        old_failed = run(ada.tenant_id, "failed", 120)
        recent = run(ada.tenant_id, "succeeded", 89)
        unfinished = run(ada.tenant_id, "running", 200)
        in_a_conversation = run(ada.tenant_id, "succeeded", 91, session=session)
    with system_scope("test"):
        type(tenant_b).objects.filter(pk=tenant_b.pk).update(conversation_retention_days=None)
    with tenant_scope(tenant_b.pk):
        kept_forever = run(tenant_b.pk, "succeeded", 400)

    assert retention.purge_old_sessionless_runs(now=now) == 2
    with tenant_scope(ada.tenant_id):
        left = set(Run.objects.values_list("pk", flat=True))
        assert left == {recent, unfinished, in_a_conversation}
        assert not Checkpoint.objects.filter(run_id__in=[old, old_failed]).exists()
    with tenant_scope(tenant_b.pk):
        assert list(Run.objects.values_list("pk", flat=True)) == [kept_forever]
    with system_scope("test"):
        [swept] = AuditEvent.objects.filter(actor_label="system:run_retention")
    assert swept.after["runs"] == 2


def test_audit_events_go_after_the_tenants_audit_retention_oldest_first(db):
    from django.db import connection

    from tenants.audit_retention import audit_purge_old
    from tenants.models import Tenant

    now = timezone.now()
    with system_scope("test"):
        # Tenants made bare, so the events below are all their logs hold.
        tenant = Tenant.objects.create(slug="thirty", name="Thirty", audit_retention_days=30)
        forever = Tenant.objects.create(slug="forever", name="Forever", audit_retention_days=None)
        # Written as they were then (the log refuses UPDATE), oldest first.
        for name, age in {"a": 400, "b": 31, "c": 29, "d": 1}.items():
            for owner in (tenant, forever):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO tenants_auditevent (tenant_id, actor_label, action,"
                        " target_type, target_id, created_at) VALUES (%s, 'test', %s, '', '', %s)",
                        [owner.pk, f"old.{name}", now - dt.timedelta(days=age)],
                    )

    assert audit_purge_old(now=now, batch=1) == {str(tenant.pk): 2}

    with system_scope("test"):
        mine = set(AuditEvent.objects.filter(tenant=tenant).values_list("action", flat=True))
        theirs = AuditEvent.objects.filter(tenant=forever).count()
        sweeps = AuditEvent.objects.filter(actor_label="system:audit_retention").count()
    assert mine == {"old.c", "old.d"}
    assert theirs == 4, "a tenant that keeps its audit forever keeps it"
    assert sweeps == 2, "each batch records what it deleted"


def test_the_beat_sweep_runs_every_retention_job_including_idempotency(members):
    counts = retention.sweep_all()
    assert set(counts) == {
        "facts",
        "sessions",
        "runs",
        "checkpoints",
        "idempotency",
        "audit",
        "run_partitions",
    }
