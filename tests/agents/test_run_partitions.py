"""The per-run tables partitioned by the month their run was made (run ids are UUID v7;
migration 0030, agents/runtime/run_partitions.py): a run's rows live in its month, retention
drops a month whole once its runs are past every window, keeps what must stay, and never a
row inside any tenant's window."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from agents.runtime import run_partitions
from agents.runtime.models import Checkpoint, Run, RunEvent
from core import ids, partitions
from tenants.models import Tenant
from tenants.scope import system_scope

pytestmark = pytest.mark.django_db(transaction=True)
DAY = dt.timedelta(days=1)


@pytest.fixture
def old_months():
    """Months made for a test's old runs; every month before this one is dropped after it."""

    def make(*moments: dt.datetime) -> None:
        with system_scope("test"), connection.cursor() as cursor:
            for table in run_partitions.TABLES:
                partitions.ensure_months(cursor, table, "run_id", moments)

    yield make
    now = partitions.month_of(timezone.now())
    with system_scope("test"), connection.cursor() as cursor:
        for table in run_partitions.TABLES:
            for month in partitions.months(cursor, table):
                if month < now:
                    partitions.drop_month(cursor, table, month)


def tenant(slug: str, *, checkpoints: int | None = 7, conversations: int | None = 90) -> Tenant:
    with system_scope("test"):
        return Tenant.objects.create(
            slug=slug,
            name=slug.title(),
            checkpoint_retention_days=checkpoints,
            conversation_retention_days=conversations,
        )


def run(owner: Tenant, made: dt.datetime, *, status="succeeded", finished=None, agent="x", pk=None):
    """A run as it was made then, with a checkpoint and an event."""
    with system_scope("test"):
        made_run = Run.objects.create(
            id=pk or ids.uuid7_at(made), tenant=owner, agent=agent, agent_version=1,
            current_step="s", status=status, finished_at=finished,
        )  # fmt: skip
        Checkpoint.objects.create(
            tenant=owner, run=made_run, seq=1, step="s", state={}, schema_version=1
        )
        RunEvent.objects.create(tenant=owner, run=made_run, seq=1, kind="run.created", data={})
        return made_run


def where(table: str, run_id) -> list[str]:
    with system_scope("test"), connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE run_id = %s", [run_id])
        return [name for (name,) in cursor.fetchall()]


def months(table: str) -> list[dt.datetime]:
    with connection.cursor() as cursor:
        return partitions.months(cursor, table)


def test_a_new_runs_rows_live_in_the_partition_of_its_month(tenant_a):
    made = run(tenant_a, timezone.now())
    assert made.pk.version == 7
    month = partitions.month_of(ids.time_of(made.pk))
    for table in ("agents_checkpoint", "agents_runevent"):
        assert where(table, made.pk) == [partitions.month_name(table, month)]
        this = partitions.month_of(timezone.now())
        assert {this, partitions.add_months(this, 1), partitions.add_months(this, 2)} <= set(
            months(table)
        )


def test_a_run_made_before_ids_were_time_ordered_keeps_its_rows_in_the_default(tenant_a):
    legacy = run(tenant_a, timezone.now(), pk=uuid.UUID("f" * 8 + "-0000-4000-8000-" + "0" * 12))
    assert where("agents_checkpoint", legacy.pk) == ["agents_checkpoint_pdefault"]
    with system_scope("test"):
        assert Checkpoint.objects.filter(run=legacy).count() == 1


def test_a_month_past_every_window_is_dropped_and_what_must_stay_moves_to_the_default(
    old_months,
):
    now = timezone.now()
    then = now - 60 * DAY
    old_months(then)
    week, forever = tenant("week"), tenant("forever", checkpoints=None)
    done = run(week, then, finished=then + DAY)
    waiting = run(week, then, status="waiting_approval")
    thread = run(week, then, agent="langgraph", finished=then + DAY)
    late = run(week, then, finished=now - 3 * DAY)  # finished inside the 7 days
    kept_forever = run(forever, then, finished=then + DAY)
    month = partitions.month_of(then)

    result = run_partitions.maintain(now=now)

    assert month not in months("agents_checkpoint"), result
    assert where("agents_checkpoint", done.pk) == []
    for must_stay in (waiting, thread, late, kept_forever):
        assert where("agents_checkpoint", must_stay.pk) == ["agents_checkpoint_pdefault"]
    assert result["dropped"]["agents_checkpoint"] == {"months": 1, "deleted": 1, "kept": 4}
    # Events go with their run: every run is still there, so the month's events all stay.
    assert month in months("agents_runevent")
    with system_scope("test"):
        assert Checkpoint.objects.filter(run=waiting).get().state == {}


def test_events_of_runs_gone_drop_with_their_month_and_a_kept_runs_move(old_months):
    now = timezone.now()
    then = now - 120 * DAY
    old_months(then)
    owner, forever = tenant("ninety"), tenant("forever", conversations=None)
    gone, kept = run(owner, then, finished=then), run(forever, then, finished=then)
    with system_scope("test"), connection.cursor() as cursor:
        # As conversation retention deletes a run (its rows are left to the month).
        cursor.execute("DELETE FROM agents_run WHERE id = %s", [gone.pk])
    run_partitions.maintain(now=now)
    assert partitions.month_of(then) not in months("agents_runevent")
    assert where("agents_runevent", gone.pk) == []
    assert where("agents_runevent", kept.pk) == ["agents_runevent_pdefault"]


def test_no_month_is_dropped_while_a_tenant_window_could_still_hold_it(old_months):
    now = timezone.now()
    then = now - 20 * DAY  # its month ends less than 7 days ago, or this month
    old_months(then)
    owner = tenant("week")
    done = run(owner, then, finished=then)
    run_partitions.maintain(now=now)
    month = partitions.month_of(then)
    if partitions.add_months(month, 1) > now - 7 * DAY:
        assert month in months("agents_checkpoint")
        assert where("agents_checkpoint", done.pk) == [
            partitions.month_name("agents_checkpoint", month)
        ]


@pytest.mark.slow  # the migration graph, back and forth
def test_the_migration_moves_populated_per_run_tables_both_ways_with_every_row_and_id(
    old_months, tenant_a
):
    from django.db.migrations.executor import MigrationExecutor

    now = timezone.now()
    old_months(now - 40 * DAY)
    runs = [
        run(tenant_a, now),
        run(tenant_a, now - 40 * DAY, finished=now - 39 * DAY),
        run(tenant_a, now, pk=uuid.UUID("0" * 8 + "-0000-4000-8000-" + "0" * 11 + "1")),
    ]

    def rows() -> dict[str, set]:
        with system_scope("test"), connection.cursor() as cursor:
            found = {}
            for table in run_partitions.TABLES:
                cursor.execute(f"SELECT id, run_id, tenant_id FROM {table}")
                found[table] = set(cursor.fetchall())
            return found

    before = rows()
    assert sum(len(r) for r in before.values()) == 6  # a checkpoint and an event each
    executor = MigrationExecutor(connection)
    executor.migrate([("agents", "0029_run_ids_time_ordered")])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_partitioned_table WHERE partrelid = ANY(%s::regclass[])",
            [list(run_partitions.TABLES)],
        )
        assert cursor.fetchone()[0] == 0
    assert rows() == before
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert rows() == before
    recent, old, legacy = runs
    assert where("agents_checkpoint", old.pk) == [
        partitions.month_name("agents_checkpoint", partitions.month_of(now - 40 * DAY))
    ]
    assert where("agents_runevent", legacy.pk) == ["agents_runevent_pdefault"]
    later = run(tenant_a, now)  # ids go on from the moved ones
    with system_scope("test"):
        assert Checkpoint.objects.get(run=later).pk > max(
            pk for pk, _, _ in before["agents_checkpoint"]
        )
