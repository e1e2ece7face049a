"""The migrations that put the tenant into every key (agents 0027-0028, approvals 0006-0007,
memory 0007-0008, tenants 0008) move a populated database both ways without losing a row:
back to single column keys, and forward again to (id, tenant_id) with composite foreign
keys."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agents.runtime.engine.runner import drive
from agents.runtime.services import conversation_start
from approvals.models import ApprovalRequest
from tenants.models import Tenant
from tenants.scope import system_scope, tenant_scope
from tests import factories

# slow: the migration graph is loaded and run back and forth (~25 s of CPU).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BEFORE = [
    ("agents", "0026_checkpoint_appended"),
    ("approvals", "0005_rls_reads_settings_once"),
    ("memory", "0006_fact_value_and_ttl"),
    ("tenants", "0007_idempotencyrecord"),
]


def tables() -> list[str]:
    """Every tenant-owned table (the models factories.TENANT_OWNED_ROWS makes a row of)."""
    found = set()
    for model in factories.TENANT_OWNED_ROWS:
        model = apps.get_model(model) if isinstance(model, str) else model
        if not model._meta.managed or model._meta.db_table.endswith("_log"):
            continue  # views (the run event log)
        found.add(model._meta.db_table)
    return sorted(found)


def counts() -> dict[str, int]:
    with system_scope("test"), connection.cursor() as cursor:  # every tenant's rows
        found = {}
        for table in tables():
            cursor.execute(f"SELECT count(*) FROM {table}")
            found[table] = cursor.fetchone()[0]
        return found


def primary_key(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(a.attname ORDER BY k.ord) FROM pg_index x"
            " CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY k(attnum, ord)"
            " JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum"
            " WHERE x.indrelid = %s::regclass AND x.indisprimary",
            [table],
        )
        return list(cursor.fetchone()[0])


def migrate(targets: list[tuple[str, str]] | None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


def test_the_keys_move_both_ways_on_a_populated_database_and_no_row_is_lost(tenant_a, tenant_b):
    for tenant in (tenant_a, tenant_b):
        admin = factories.principal_for(factories.make_member(tenant, "admin"))
        with tenant_scope(tenant.pk):
            # $400 waits for a manager: a session, messages, checkpoints, events, the ledger's
            # lookups, a packed context and an approval request.
            run = conversation_start(
                principal=admin,
                agent="refund_desk",
                message="Please refund $400 for order A-1001, I was charged twice",
                title="migration",
            )
        drive(tenant_id=str(tenant.pk), run_id=run.pk, worker="w", slice_seconds=3600)
        with tenant_scope(tenant.pk):
            assert ApprovalRequest.objects.filter(run=run).exists()
        for model in factories.TENANT_OWNED_ROWS:  # and a row of every other kind
            if model is not Tenant:
                factories.make_row(model, tenant)
    before = counts()
    assert [t for t, n in before.items() if n < 2] == [], before

    try:
        migrate(BEFORE)
        assert primary_key("agents_run") == ["id"] and primary_key("tenants_apikey") == ["id"]
        assert counts() == before
    finally:
        migrate(None)

    assert counts() == before
    assert primary_key("agents_run") == ["id", "tenant_id"]
    assert primary_key("approvals_approvalrequest") == ["id", "tenant_id"]
    assert primary_key("memory_memoryfact") == ["id", "tenant_id"]
    assert primary_key("tenants_apikey") == ["id", "tenant_id"]
