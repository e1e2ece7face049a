"""A run's and a checkpoint's counts (version, seq, ...) are never negative: one CHECK per table
holds them all (core/fields.py), each count named in it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from agents.runtime.models import Checkpoint, Run
from core.fields import CountField
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db


def counts(model) -> list[str]:
    """The model's CountFields: each must be named in its table's one CHECK."""
    return [field.attname for field in model._meta.fields if isinstance(field, CountField)]


@pytest.fixture
def checkpointed(start, step, admin):
    run = start("three_steps")
    step(run, slice_seconds=0)  # one step: a checkpoint, and the run back in the queue
    return run


def _set(table: str, column: str, value, run, tenant) -> None:
    key = "id" if table == "agents_run" else "run_id"
    with tenant_scope(tenant.pk), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s WHERE {key} = %s", [value, run.pk])
        assert cursor.rowcount >= 1


@pytest.mark.parametrize("column", counts(Run))
def test_the_database_refuses_a_run_with_a_negative_count(column, checkpointed, admin):
    with pytest.raises(IntegrityError, match="run_counts_not_negative"):
        _set("agents_run", column, -1, checkpointed, admin.tenant)


@pytest.mark.parametrize("column", counts(Checkpoint))
def test_the_database_refuses_a_checkpoint_with_a_negative_count(column, checkpointed, admin):
    with pytest.raises(IntegrityError, match="checkpoint_counts_not_negative"):
        _set("agents_checkpoint", column, -1, checkpointed, admin.tenant)


def test_zero_and_an_empty_optional_count_pass_as_before(checkpointed, admin):
    _set("agents_run", "attempts", 0, checkpointed, admin.tenant)
    _set("agents_checkpoint", "attempt", None, checkpointed, admin.tenant)
    _set("agents_checkpoint", "event_seq", None, checkpointed, admin.tenant)
    with tenant_scope(admin.tenant.pk):
        assert Run.objects.for_tenant(admin.tenant).get(pk=checkpointed.pk).attempts == 0
        [kept] = Checkpoint.objects.for_tenant(admin.tenant).filter(run=checkpointed)
        assert kept.attempt is None and kept.event_seq is None


@pytest.mark.parametrize("table", ["agents_run", "agents_checkpoint"])
def test_each_table_the_engine_writes_every_step_carries_one_check(table):
    """PostgreSQL prepares every CHECK of a row for each statement that writes it: a count
    added to these tables as a PositiveIntegerField (its own CHECK) instead of a CountField
    named in the table's one constraint would put that cost back on every step."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
            [table],
        )
        names = [name for (name,) in cursor.fetchall()]
    assert names == [table.removeprefix("agents_") + "_counts_not_negative"]
