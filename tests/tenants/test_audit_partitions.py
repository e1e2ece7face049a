"""The audit log partitioned by month (core/partitions.py, tenants/audit_retention.py,
migration tenants 0009): months made ahead, rows outside them kept in a default partition,
retention that drops whole months and never a row inside any owner's window, and a migration
that moves a populated log both ways with every row and id."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from core import partitions
from tenants.audit_retention import TABLE, audit_months_ahead, audit_purge_old
from tenants.models import AuditEvent, Tenant
from tenants.scope import system_scope

pytestmark = pytest.mark.django_db(transaction=True)
DAY = dt.timedelta(days=1)


@pytest.fixture
def old_months():
    """Months made for a test's old events; every month before this one is dropped after it
    (the database is the next test's too, and a fresh one has none)."""

    def make(*moments: dt.datetime) -> None:
        with system_scope("test"), connection.cursor() as cursor:
            partitions.ensure_months(cursor, TABLE, "created_at", moments)

    yield make
    now = partitions.month_of(timezone.now())
    with system_scope("test"), connection.cursor() as cursor:
        for month in partitions.months(cursor, TABLE):
            if month < now:
                partitions.drop_month(cursor, TABLE, month)


def tenant(slug: str, days: int | None) -> Tenant:
    with system_scope("test"):
        return Tenant.objects.create(slug=slug, name=slug.title(), audit_retention_days=days)


def event(owner: Tenant | None, at: dt.datetime, action: str = "test.event") -> int:
    """An event written as it was then (the log refuses UPDATE)."""
    with system_scope("test"), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tenants_auditevent (tenant_id, actor_label, action, target_type,"
            " target_id, created_at) VALUES (%s, 'test', %s, '', '', %s) RETURNING id",
            [owner and owner.pk, action, at],
        )
        return cursor.fetchone()[0]


def where(event_id: int) -> str | None:
    """The partition holding the event, or None when it is gone."""
    with system_scope("test"), connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM tenants_auditevent WHERE id = %s", [event_id]
        )
        row = cursor.fetchone()
        return row and row[0]


def month_tables() -> list[dt.datetime]:
    with connection.cursor() as cursor:
        return partitions.months(cursor, TABLE)


def test_the_log_has_a_partition_for_this_month_and_the_next_two_and_a_default():
    this = partitions.month_of(timezone.now())
    assert {this, partitions.add_months(this, 1), partitions.add_months(this, 2)} <= set(
        month_tables()
    )
    new = event(None, timezone.now())
    assert where(new) == partitions.month_name(TABLE, this)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relrowsecurity AND c.relforcerowsecurity FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        assert all(secured for (secured,) in cursor.fetchall()), "every partition has RLS"


def test_an_event_outside_every_month_waits_in_the_default_and_moves_when_its_month_is_made(
    old_months,
):
    when = timezone.now() - 200 * DAY
    early = event(None, when)
    assert where(early) == partitions.default_name(TABLE)
    old_months(when)  # as the sweep would for a month ahead: the waiting row moves in
    assert where(early) == partitions.month_name(TABLE, partitions.month_of(when))
    later = event(None, when + dt.timedelta(seconds=1))
    assert where(later) == where(early) and later > early


def test_a_month_every_owner_has_let_go_is_dropped_and_rows_still_kept_move_to_the_default(
    old_months,
):
    now = timezone.now()
    thirty, forever, year = tenant("thirty", 30), tenant("forever", None), tenant("year", 365)
    then = now - 100 * DAY
    old_months(then)
    month = partitions.month_of(then)
    gone = event(thirty, then)
    kept = {event(forever, then), event(year, then), event(None, then)}
    recent = event(thirty, now - DAY)

    assert audit_purge_old(now=now)[str(thirty.pk)] == 1
    assert month not in month_tables(), "the whole month was dropped"
    assert where(gone) is None and where(recent) is not None
    assert {where(k) for k in kept} == {partitions.default_name(TABLE)}
    with system_scope("test"):
        [dropped] = AuditEvent.objects.filter(
            actor_label="system:audit_partitions", after__month=f"{month:%Y-%m}"
        )
    assert (dropped.after["deleted"], dropped.after["kept"]) == (1, 3)


def test_retention_never_deletes_a_row_inside_any_owners_window(old_months, settings):
    settings.AUDIT_SYSTEM_RETENTION_DAYS = 200
    now = timezone.now()
    rng = random.Random(7)
    owners = [tenant(f"t{days}", days) for days in (1, 45, 90, 400)] + [tenant("keep", None)]
    windows = {o.pk: o.audit_retention_days for o in owners} | {None: 200}
    ages = [rng.uniform(0, 500) for _ in range(120)]
    old_months(*(now - age * DAY for age in ages))
    rows = {}
    for age in ages:
        owner = rng.choice([*owners, None])
        rows[event(owner, now - age * DAY)] = (owner and owner.pk, age)

    audit_purge_old(now=now, batch=7)

    for event_id, (owner, age) in rows.items():
        window = windows[owner]
        inside = window is None or age < window
        assert (where(event_id) is not None) == inside, (owner, window, age)
    assert not [m for m in month_tables() if partitions.add_months(m, 1) <= now - 45 * DAY]


def test_the_sweep_makes_the_months_ahead_it_lacks():
    later = timezone.now() + 120 * DAY
    assert audit_months_ahead(now=later) >= 1
    assert partitions.month_of(later) in month_tables()
    assert audit_months_ahead(now=later) == 0


def test_the_migration_moves_a_populated_log_both_ways_with_every_row_and_id(old_months):
    now = timezone.now()
    owner = tenant("moved", None)
    old_months(now - 70 * DAY)
    ids = {event(owner, now - age * DAY) for age in (0, 1, 70, 300)} | {event(None, now)}

    def log() -> dict[int, tuple]:
        with system_scope("test"):
            return {
                e.pk: (e.tenant_id, e.action, e.created_at)
                for e in AuditEvent.objects.filter(pk__in=ids)
            }

    before = log()
    executor = MigrationExecutor(connection)
    executor.migrate([("tenants", "0008_primary_keys_with_the_tenant")])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_partitioned_table WHERE partrelid = %s::regclass", [TABLE]
        )
        assert cursor.fetchone()[0] == 0
    assert log() == before
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert log() == before
    assert where(max(ids)) == partitions.month_name(TABLE, partitions.month_of(now))
    assert partitions.month_of(now - 300 * DAY) in month_tables(), "from the oldest event's month"
    assert event(owner, now) > max(ids), "new ids go on from the moved ones"
