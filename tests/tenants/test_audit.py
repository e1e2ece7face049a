"""The audit log: recorded by services, append-only in the database."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from tenants.audit import audit_record
from tenants.models import AuditEvent, Tenant
from tenants.scope import system_scope, tenant_scope
from tests import factories


def test_audit_record_keeps_actor_action_target_and_change(db, tenant_a):
    admin = factories.make_member(tenant_a, "admin")
    principal = factories.principal_for(admin)
    with tenant_scope(tenant_a.pk):
        event = audit_record(
            tenant=tenant_a,
            actor=principal,
            action="thing.changed",
            target=admin,
            before={"a": 1},
            after={"a": 2},
        )
        event.refresh_from_db()
    assert event.actor_user == admin.user
    assert event.actor_label == admin.user.username
    assert (event.target_type, event.target_id) == ("tenants.membership", str(admin.pk))
    assert (event.before, event.after) == ({"a": 1}, {"a": 2})


def test_audit_events_cannot_be_updated_even_by_their_own_tenant(db, tenant_a):
    event = factories.make_row(AuditEvent, tenant_a)
    with tenant_scope(tenant_a.pk):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            AuditEvent.objects.filter(pk=event.pk).update(action="rewritten")


def test_audit_events_cannot_be_deleted_outside_the_system_context(db, tenant_a):
    event = factories.make_row(AuditEvent, tenant_a)
    with tenant_scope(tenant_a.pk):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            AuditEvent.objects.filter(pk=event.pk).delete()
    with system_scope("audit_retention"):
        assert AuditEvent.objects.filter(pk=event.pk).delete()[0] == 1


def test_the_system_context_sees_every_tenant_and_audits_what_it_changed(db, tenant_a, tenant_b):
    with system_scope("test_sweep") as ctx:
        assert {"acme-test", "globex-test"} <= set(Tenant.objects.values_list("slug", flat=True))
        ctx.record(purged=3)
    with system_scope("test_inspection"):
        event = AuditEvent.objects.filter(action="system.test_sweep").get()
    assert event.tenant is None
    assert event.actor_label == "system:test_sweep"
    assert event.after == {"purged": 3}


def test_a_system_context_needs_a_plain_name(db):
    with pytest.raises(ValueError), system_scope("drop table; --"):
        pass


def test_creating_a_tenant_is_audited(db):
    tenant = factories.make_tenant("audited")
    with tenant_scope(tenant.pk):
        actions = list(AuditEvent.objects.for_tenant(tenant).values_list("action", flat=True))
    assert actions == ["tenant.created"]


def _synchronous_commit() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_a_read_audit_is_written_after_the_reading_transaction_in_one_that_does_not_wait_for_the_disk(  # noqa: E501
    transactional_db, tenant_a
):
    from tenants.read_audit import audit_read

    principal = factories.principal_for(factories.make_member(tenant_a, "admin"))
    sent: list[str] = []

    def note(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    def read(action: str) -> None:
        audit_read(
            tenant=tenant_a,
            actor=principal,
            action=action,
            target_type="auth.user",
            target_id="7",
        )

    with connection.execute_wrapper(note):
        with tenant_scope(tenant_a.pk):  # the reading request's transaction
            read("memory.read_by_api_key")
            assert not AuditEvent.objects.filter(action="memory.read_by_api_key").exists()
            assert _synchronous_commit() == "on"
            written_before_commit = len(sent)
        # After its commit, in a transaction of its own whose commit does not wait for the disk.
        after = sent[written_before_commit:]
        assert any("synchronous_commit TO OFF" in sql for sql in after)
        assert any("INSERT INTO" in sql and "tenants_auditevent" in sql for sql in after)
    with tenant_scope(tenant_a.pk):
        assert _synchronous_commit() == "on"  # SET LOCAL: the next transaction is durable
        assert AuditEvent.objects.filter(action="memory.read_by_api_key").count() == 1

    # A read whose transaction rolls back records nothing.
    with pytest.raises(ZeroDivisionError), tenant_scope(tenant_a.pk):
        read("memory.support_viewed")
        1 / 0  # noqa: B018
    with tenant_scope(tenant_a.pk):
        assert not AuditEvent.objects.filter(action="memory.support_viewed").exists()
