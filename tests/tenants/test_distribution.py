"""The schema could be distributed by tenant (Citus) as it stands, checked on the migrated
database rather than promised (tenants/distribution.py, docs/scaling.md):

- every table with a tenant_id is placed: distributed by it, a reference table or local;
- a distributed table's primary key and every unique key carry tenant_id;
- every foreign key between distributed tables is (column, tenant_id) -> (id, tenant_id),
  so a row cannot point at another tenant's row, even where row-level security would not see;
- no reference or other table points into a distributed one;
- the engine's statements name the tenant, so each one goes to one shard, and every sweep
  locks and changes one tenant's rows per statement.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction

from agents.runtime.models import Run
from tenants import distribution
from tenants.scope import system_scope

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def catalog(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def tenant_tables() -> set[str]:
    return {
        name
        for (name,) in catalog(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"
            " AND a.attname = 'tenant_id' AND NOT a.attisdropped AND NOT c.relispartition"
        )
    }


def partitioned_by(column: str) -> list[str]:
    return [
        name
        for (name,) in catalog(
            "SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]"
            " WHERE a.attname = %s",
            [column],
        )
    ]


def distributed() -> set[str]:
    return tenant_tables() - set(distribution.REFERENCE_TABLES) - set(distribution.LOCAL_TABLES)


def key_columns(kind: str) -> list[tuple[str, str, list[str]]]:
    """(table, constraint or index, columns) of the primary keys ('p') or unique indexes ('u')."""
    flag = "x.indisprimary" if kind == "p" else "x.indisunique AND NOT x.indisprimary"
    rows = catalog(
        "SELECT t.relname, i.relname, array_agg(a.attname ORDER BY k.ord)"
        " FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid"
        " JOIN pg_class i ON i.oid = x.indexrelid"
        " CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY k(attnum, ord)"
        " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum"
        f" WHERE t.relnamespace = 'public'::regnamespace AND {flag} AND NOT t.relispartition"
        " GROUP BY t.relname, i.relname"
    )
    return [(t, i, list(cols)) for t, i, cols in rows]


def foreign_keys() -> list[tuple[str, str, list[str], str, list[str]]]:
    rows = catalog(
        "SELECT c.conrelid::regclass::text, c.conname,"
        " (SELECT array_agg(a.attname ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY"
        "  k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum),"
        " c.confrelid::regclass::text,"
        " (SELECT array_agg(a.attname ORDER BY k.ord) FROM unnest(c.confkey) WITH ORDINALITY"
        "  k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum)"
        " FROM pg_constraint c WHERE c.contype = 'f'"
        " AND c.connamespace = 'public'::regnamespace AND c.conparentid = 0"
    )
    return [(t, n, list(cols), p, list(pcols)) for t, n, cols, p, pcols in rows]


def test_every_table_with_a_tenant_is_placed_and_the_lists_name_only_real_tables():
    tables = tenant_tables()
    assert len(distributed()) >= 20
    assert set(distribution.REFERENCE_TABLES) - {"tenants_tenant"} <= tables
    assert set(distribution.LOCAL_TABLES) <= tables
    for table, _, parent in distribution.DISTRIBUTED_FOREIGN_KEYS:
        assert table in distributed() and parent in distributed(), (table, parent)


def test_a_distributed_tables_primary_key_and_each_unique_key_carry_the_tenant():
    placed = distributed()
    # Every table with a tenant (reference tables too) but the local ones: (id, tenant_id).
    keyed = tenant_tables() - set(distribution.LOCAL_TABLES)
    primary = {t: cols for t, _, cols in key_columns("p") if t in keyed}
    assert set(primary) == keyed  # every one has a primary key
    # A partitioned table's key also holds its partition column (the per-run tables: run_id).
    by_run = set(partitioned_by("run_id"))
    assert {
        t: cols
        for t, cols in primary.items()
        if cols != ["id", "tenant_id"] + (["run_id"] if t in by_run else [])
    } == {}
    missing = [(t, i, cols) for t, i, cols in key_columns("u") if t in placed]
    assert [(t, i, cols) for t, i, cols in missing if "tenant_id" not in cols] == []


def test_foreign_keys_between_distributed_tables_carry_the_tenant_and_none_point_into_them():
    placed = distributed()
    composite = set()
    for table, name, cols, parent, parent_cols in foreign_keys():
        if parent not in placed:
            # To a reference table (the tenant, a user) or between tables not distributed.
            assert table not in distribution.REFERENCE_TABLES or parent not in placed
            continue
        assert table in placed, f"{table} ({name}) points into the distributed {parent}"
        assert cols[-1] == "tenant_id" and parent_cols == ["id", "tenant_id"], (name, cols)
        composite.add((table, cols[0], parent))
    assert composite == set(distribution.DISTRIBUTED_FOREIGN_KEYS)


def test_a_row_cannot_point_at_another_tenants_row(tenant_a, tenant_b):
    with system_scope("test"):
        theirs = Run.objects.create(
            tenant=tenant_b, agent="refund_desk", agent_version=1, current_step="s"
        )
        with pytest.raises(IntegrityError), transaction.atomic():
            # A tool call of tenant A naming tenant B's run: the key (run_id, tenant_id) has
            # no such run. (With a foreign key on run_id alone this was accepted.)
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO agents_toolcall (tenant_id, run_id, seq, call_index, tool,"
                    " idempotency_key, arguments, status, sends, created_at)"
                    " VALUES (%s, %s, 1, 0, 'x', %s, '{}', 'intent', 1, now())",
                    [tenant_a.pk, theirs.pk, str(uuid.uuid4())],
                )
            connection.check_constraints()  # the deferred key, checked now


def test_the_citus_statements_place_every_table_once_reference_tables_first():
    statements = distribution.citus_ddl(sorted(tenant_tables()))
    named = [re.search(r"'(\w+)'", s)[1] for s in statements]
    assert len(named) == len(set(named))
    assert set(named) == distributed() | set(distribution.REFERENCE_TABLES)
    first_distributed = next(i for i, s in enumerate(statements) if "distributed" in s)
    assert all("reference" in s for s in statements[:first_distributed])


# Sweeps' reads without locks that find the tenants with work, and multi-shard statements
# Citus runs as they are (a DELETE of every expired row, no LIMIT, no row locks). Every
# statement that locks rows names one tenant (checked below, and by running the sweeps).
ACROSS_TENANTS = {
    "crowded_run_counts.sql",
    "delete_expired_idempotency_records.sql",
    "running_lease_owners.sql",
    "tenants_of_worker.sql",
    "tenants_with_due_runs.sql",
    "tenants_with_expired_facts.sql",
}
SQL_FOLDERS = ["agents/runtime/sql", "memory/sql", "approvals/sql"]
STATEMENTS = [
    "agents/runtime/engine/sql/claim_run_v4.sql",
    "agents/runtime/engine/sql/persist_step_v4.sql",
    *(
        str(p.relative_to(ROOT))
        for folder in SQL_FOLDERS
        for p in sorted((ROOT / folder).glob("*.sql"))
        if p.name not in ACROSS_TENANTS
    ),
]
ONE_TENANT = re.compile(r'tenant_id"?\s*=\s*(?:%s|%\(tenant\)s|p_tenant)')


@pytest.mark.parametrize("path", STATEMENTS)
def test_the_engines_statements_name_the_tenant_of_every_row_they_touch(path):
    text = re.sub(r"--[^\n]*", "", (ROOT / path).read_text())
    # Each condition that finds a row of a table by its run (`id = p_run`, `run_id = ...`;
    # not the joins between the statement's own CTEs) also names the tenant.
    for match in re.finditer(r"(?:\b(?:r|cp)\.|(?<![\w.]))(?:id|run_id)\s*=", text):
        start = max(text.rfind(" WHERE ", 0, match.start()), text.rfind(" ON ", 0, match.start()))
        end = re.search(r"RETURNING|;|\n\s*\)|\bSELECT\b|\bORDER\b", text[match.end() :])
        clause = text[start : match.end() + (end.start() if end else len(text))]
        assert "tenant_id" in clause, f"{path}: {clause.strip()[:90]}"
    for match in re.finditer(r"INSERT INTO (agents_\w+)\s*\(([^)]*)\)", text):
        assert "tenant_id" in match.group(2), f"{path}: INSERT INTO {match.group(1)}"


@pytest.mark.parametrize("name", sorted(ACROSS_TENANTS))
def test_a_statement_over_every_tenant_locks_nothing_and_changes_no_bounded_batch(name):
    [path] = [ROOT / folder / name for folder in SQL_FOLDERS if (ROOT / folder / name).exists()]
    text = re.sub(r"--[^\n]*", "", path.read_text())
    assert not re.search(r"\bFOR\s+(?:UPDATE|SHARE)\b", text, re.IGNORECASE)
    if re.match(r"\s*(?:UPDATE|DELETE|INSERT|WITH)", text, re.IGNORECASE):
        assert not re.search(r"\bLIMIT\b", text), "a bounded change over every shard"


def test_every_sweep_locks_and_changes_the_rows_of_one_tenant_per_statement(
    tenant_a, tenant_b, monkeypatch
):
    """The beat's sweeps, run over two tenants that each have work for every one of them:
    each statement that locks rows (FOR UPDATE) or changes a bounded batch names one tenant,
    so under Citus it runs on that tenant's shard."""
    import datetime as dt

    from django.utils import timezone

    from agents.runtime import run_counts, sweeps
    from approvals.services import approval_requests_sweep_due
    from memory.facts import retention
    from memory.facts.remember import fact_remember
    from memory.models import MemoryFact
    from tenants.scope import tenant_scope
    from tests import factories
    from tests.approvals.conftest import add_policy, paused_refund

    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: None)
    monkeypatch.setattr(run_counts, "COMPACT_ABOVE", 0)
    now = timezone.now()
    long_ago, a_month_ago = now - dt.timedelta(days=400), now - dt.timedelta(days=30)
    in_a_minute = now + dt.timedelta(minutes=1)
    requests = []
    for tenant in (tenant_a, tenant_b):
        admin, member = factories.make_member(tenant, "admin"), factories.make_member(tenant)
        add_policy(admin, expires_after_minutes=1, on_expiry="reject")
        requests.append(paused_refund(member)[1])
        with tenant_scope(tenant.pk):
            fact_remember(
                tenant_id=tenant.pk, subject_id=member.user_id, category="preference",
                text="Likes tea", ttl_minutes=1,
            )  # fmt: skip
    with system_scope("test"):
        for tenant in (tenant_a, tenant_b):
            for status, changed, extra in [
                ("running", long_ago, {"lease_owner": "gone@host", "lease_expires_at": long_ago}),
                # a worker whose key is gone, but which wrote a moment ago: only the
                # Celery parent's word (take_back_from) takes its run
                ("running", now, {"lease_owner": "killed@host", "lease_expires_at": in_a_minute}),
                ("waiting_timer", long_ago, {"not_before": long_ago}),
                ("queued", long_ago, {"not_before": long_ago}),
                ("succeeded", long_ago, {"finished_at": long_ago}),  # the run goes
                ("succeeded", a_month_ago, {"finished_at": a_month_ago}),  # its checkpoint goes
            ]:
                run = Run.objects.create(
                    tenant=tenant, agent="x", agent_version=1, current_step="s", status=status
                )
                Run.objects.filter(pk=run.pk).update(
                    created_at=changed, updated_at=changed, **extra
                )
                run.checkpoints.create(tenant=tenant, seq=1, step="s", state={}, schema_version=1)

    seen: list[str] = []

    def capture(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        counts = sweeps.recover()
        taken = sweeps.take_back_from("killed@host")
        folded = run_counts.compact()
        swept = retention.sweep_all(now=now + dt.timedelta(days=1))
        decided = approval_requests_sweep_due(now=now + dt.timedelta(minutes=2))
    assert counts == {"lost_leases": 2, "timers_woken": 2, "requeued": 2}
    assert taken == 2 and folded > 0
    assert (swept["facts"], swept["runs"], swept["checkpoints"]) == (2, 2, 2)
    assert decided == {"expired": 2, "escalated": 0}
    with system_scope("test"):
        assert not MemoryFact.objects.exists()
    locking = [sql for sql in seen if locks_rows(sql) and not on_a_local_table(sql)]
    # every sweep above (lost, taken back, timers, stale, facts, old versions, checkpoints,
    # deadlines), for each tenant
    assert len(locking) >= 16
    assert [sql for sql in locking if not ONE_TENANT.search(sql)] == []


def on_a_local_table(sql: str) -> bool:
    """Changes a table kept on the coordinator (the audit log): no shard to go to."""
    target = re.match(r"\s*(?:DELETE\s+FROM|UPDATE|INSERT\s+INTO)\s+\"?(\w+)", sql, re.IGNORECASE)
    return bool(target and target[1] in distribution.LOCAL_TABLES)


def locks_rows(sql: str) -> bool:
    """Locks rows, or changes a bounded batch (which needs the rows' order on one shard)."""
    if re.search(r"\bFOR\s+(?:NO\s+KEY\s+)?(?:UPDATE|SHARE)\b", sql, re.IGNORECASE):
        return True
    changes = re.match(r"\s*(?:UPDATE|DELETE|INSERT|WITH)\b", sql, re.IGNORECASE)
    return bool(changes and re.search(r"\bLIMIT\b", sql, re.IGNORECASE))
