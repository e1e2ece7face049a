"""How many of a tenant's runs are in each status, at the cost of one indexed read whatever
the tenant's size: the sum of its `agents_runcount` rows, which triggers on `agents_run` keep
(models.RunCount; engine/sql/run_counts_v1.sql). Exact: the sum counts every committed change
and nothing else, read in one statement; there is nothing to lag.

Rows grow by two per status change; `compact()` (beat, every AGENTSTATE_RUN_COUNTS_COMPACT_SECONDS)
folds a tenant's rows into one per status once it has more than COMPACT_ABOVE, so a read
sums at most a few hundred rows.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Sum

from agents.runtime.metrics import record_sweep
from agents.runtime.models import RunCount
from core import sql
from tenants.scope import system_scope

CROWDED_SQL = sql.load("agents.runtime", "crowded_run_counts")
COMPACT_SQL = sql.load("agents.runtime", "compact_run_counts")
COMPACT_ABOVE = 64  # rows of one tenant
TENANTS_PER_PASS = 500


def by_status(tenant_id: Any) -> dict[str, int]:
    """The tenant's runs counted by status (only the statuses with runs)."""
    rows = (
        RunCount.objects.for_tenant(tenant_id)
        .values_list("status")
        .annotate(total=Sum("n"))
        .order_by()
    )
    return {status: total for status, total in rows if total}


def compact() -> int:
    """Fold crowded tenants' rows (and drop those of tenants gone); the rows folded away.
    Tenant by tenant, each in its own transaction (under Citus, on the tenant's shard)."""
    folded = 0
    with system_scope("run_counts_compaction"), connection.cursor() as cursor:
        cursor.execute(CROWDED_SQL, {"rows": COMPACT_ABOVE, "tenants": TENANTS_PER_PASS})
        crowded = [tenant_id for (tenant_id,) in cursor.fetchall()]
    for tenant_id in crowded:
        with system_scope("run_counts_compaction"), connection.cursor() as cursor:
            cursor.execute(COMPACT_SQL, {"tenant": tenant_id})
            folded += cursor.fetchone()[0]
    record_sweep("run_counts_compaction", {"folded": folded})
    return folded
