"""Isolation in PostgreSQL itself: row-level security on every tenant-owned table."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.db import DatabaseError, connection, transaction

from tenants.models import AuditEvent, Tenant
from tenants.rls import read_settings_once
from tenants.scope import current_settings, system_scope, tenant_scope
from tests import factories


def tenant_owned_models() -> list:
    """Every model with a foreign key to Tenant, plus Tenant itself."""
    found = [Tenant]
    for model in apps.get_models():
        fk = next((f for f in model._meta.fields if f.name == "tenant"), None)
        if fk is not None and fk.related_model is Tenant:
            found.append(model)
    return found


def count_rows(table: str, where: str = "") -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table} {where}")
        return cursor.fetchone()[0]


def tenant_column(model) -> str:
    return "id" if model is Tenant else "tenant_id"


# Tables, and the read-only views over them (unmanaged models).
MODELS = [m for m in tenant_owned_models() if m._meta.managed]
IDS = [m._meta.label for m in MODELS]
VIEWS = [m for m in tenant_owned_models() if not m._meta.managed]
VIEW_IDS = [m._meta.label for m in VIEWS]


def test_every_tenant_owned_model_has_a_factory_for_these_tests():
    missing = [m._meta.label for m in MODELS + VIEWS if factories.row_factory(m) is None]
    assert not missing, f"add a row factory to tests/factories.py for {missing}"


@pytest.mark.parametrize("view", VIEWS, ids=VIEW_IDS)
def test_a_view_of_tenant_owned_rows_reads_them_with_the_callers_row_level_security(db, view):
    # Without security_invoker a view reads its tables with its owner's rights.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relkind, reloptions FROM pg_class WHERE relname = %s", [view._meta.db_table]
        )
        kind, options = cursor.fetchone()
    assert kind == "v" and "security_invoker=true" in (options or [])


@pytest.mark.parametrize("view", VIEWS, ids=VIEW_IDS)
def test_a_view_shows_no_rows_without_a_tenant_and_only_tenant_a_rows_to_tenant_a(
    db, view, tenant_a, tenant_b
):
    factories.make_row(view, tenant_a)
    factories.make_row(view, tenant_b)
    table = view._meta.db_table
    with transaction.atomic():
        assert count_rows(table) == 0
    with tenant_scope(tenant_a.pk):
        assert count_rows(table) >= 2
        assert count_rows(table, f"WHERE tenant_id <> '{tenant_a.pk}'") == 0
        assert view.objects.for_tenant(tenant_b).count() == 0
    with system_scope("test_inspection"):
        assert count_rows(table, f"WHERE tenant_id = '{tenant_b.pk}'") >= 2


def test_the_application_role_cannot_bypass_row_level_security(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone() == (False, False)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_row_level_security_is_enabled_and_forced(db, model):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE relname = %s",
            [model._meta.db_table],
        )
        assert cursor.fetchone() == (True, True)
        cursor.execute(
            "SELECT count(*) FROM pg_policies WHERE tablename = %s", [model._meta.db_table]
        )
        assert cursor.fetchone()[0] >= 1


PER_ROW_READ = re.compile(r"(?<!SELECT )app_(tenant_id|user_id|in_system_context)\(\)")


def test_every_policy_reads_the_tenant_settings_once_per_statement_not_per_row(db):
    # `(SELECT app_tenant_id())` is an InitPlan, evaluated once; a bare call runs per row.
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename, policyname, qual, with_check FROM pg_policies")
        policies = cursor.fetchall()
    assert len(policies) >= len(MODELS)
    per_row = [
        (table, name)
        for table, name, qual, check in policies
        if PER_ROW_READ.search(f"{qual or ''} {check or ''}")
    ]
    assert per_row == []


def test_the_migration_rewrites_a_policy_that_reads_the_settings_per_row(db):
    per_row = "(tenant_id = app_tenant_id() OR app_in_system_context())"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"ALTER POLICY tenant_isolation ON tenants_apikey USING {per_row} WITH CHECK {per_row}"
        )
        cursor.execute(read_settings_once("tenants").sql)
        cursor.execute(
            "SELECT qual, with_check FROM pg_policies WHERE tablename = 'tenants_apikey'"
        )
        (qual, check), *_ = cursor.fetchall()
        transaction.set_rollback(True)
    once = (
        "((tenant_id = ( SELECT app_tenant_id() AS app_tenant_id))"
        " OR ( SELECT app_in_system_context() AS app_in_system_context))"
    )
    assert (qual, check) == (once, once)


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_a_raw_select_without_tenant_context_returns_no_rows(db, model, tenant_a, tenant_b):
    factories.make_row(model, tenant_a)
    factories.make_row(model, tenant_b)
    assert current_settings() == ("", "", "")
    with transaction.atomic():
        assert count_rows(model._meta.db_table) == 0


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_a_raw_select_in_tenant_a_context_returns_only_tenant_a_rows(db, model, tenant_a, tenant_b):
    factories.make_row(model, tenant_a)
    factories.make_row(model, tenant_b)
    table, column = model._meta.db_table, tenant_column(model)
    with tenant_scope(tenant_a.pk):
        assert count_rows(table) >= 1
        assert count_rows(table, f"WHERE {column} <> '{tenant_a.pk}'") == 0
    with system_scope("test_inspection"):
        assert count_rows(table, f"WHERE {column} = '{tenant_b.pk}'") >= 1


@pytest.mark.parametrize(
    "model",
    [m for m in MODELS if m is not Tenant],
    ids=[i for m, i in zip(MODELS, IDS, strict=True) if m is not Tenant],
)
def test_the_database_refuses_a_row_for_tenant_b_under_tenant_a_context(
    db, model, tenant_a, tenant_b
):
    with tenant_scope(tenant_a.pk):
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            factories.row_factory(model)(tenant_b)


def test_the_database_refuses_moving_a_row_to_another_tenant(db, tenant_a, tenant_b):
    row = factories.make_row(AuditEvent, tenant_a)
    with tenant_scope(tenant_a.pk), pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=row.pk).update(tenant=tenant_b)


def test_a_tenant_cannot_be_created_outside_the_system_context(db):
    with transaction.atomic():
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            Tenant.objects.create(slug="sneaky", name="Sneaky")


def test_a_user_reads_only_the_tenants_they_belong_to(db, tenant_a, tenant_b):
    membership = factories.make_member(tenant_a)
    from tenants.scope import activate
    from tenants.selectors import memberships_for_user

    with transaction.atomic():
        activate(tenant_id=None, user_id=membership.user.pk)
        seen = {m.tenant.slug for m in memberships_for_user(membership.user)}
        assert seen == {"acme-test"}
        assert set(Tenant.objects.values_list("slug", flat=True)) == {"acme-test"}


def test_tenant_context_restores_the_enclosing_settings(db, tenant_a, tenant_b):
    with tenant_scope(tenant_a.pk):
        with tenant_scope(tenant_b.pk):
            assert current_settings()[0] == str(tenant_b.pk)
        assert current_settings()[0] == str(tenant_a.pk)
    assert current_settings() == ("", "", "")


def test_activating_a_tenant_outside_a_transaction_is_refused(db):
    from tenants.scope import activate

    # The db fixture wraps each test in a transaction; step outside it for this check.
    connection.in_atomic_block, saved = False, connection.in_atomic_block
    try:
        with pytest.raises(RuntimeError, match="inside transaction.atomic"):
            activate(tenant_id="00000000-0000-0000-0000-000000000000")
    finally:
        connection.in_atomic_block = saved
