"""The per-run tables' months (migration 0030; core/partitions.py), kept by the hourly retention
sweep (memory/facts/retention.py):

- the partitions of this month and the next two are made ahead, for every per-run table;
- a month is dropped whole once it ended longer ago than the shortest window any tenant
  keeps: `checkpoint_retention_days` for checkpoints, `conversation_retention_days` for the
  others (whose rows go with their run). The rows that must stay (a run not finished, a
  LangGraph thread's state, a tenant that keeps longer or forever, a run still kept) are moved
  into the default partition first, so no tenant pins a month for the others.

What a month drop cannot take (rows moved to the default partition, months not yet old
enough) is deleted row by row as before: `purge_old_checkpoints`, and each run's rows with the
run. A month's rows are counted before the table is locked; moving kept rows holds the lock
(the engine's writes to that table wait), and a lock not had within 2 s is left for the next
sweep.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import OperationalError, connection
from django.db.models import Min

from core import partitions
from tenants.models import Tenant
from tenants.scope import system_scope

logger = logging.getLogger(__name__)

MONTHS_AHEAD = 2
# Rows that must outlive their month: a checkpoint of a run that is not finished, of a
# LangGraph thread (its state), or inside its tenant's checkpoint window.
KEEP_CHECKPOINT = """EXISTS (
    SELECT 1 FROM agents_run r JOIN tenants_tenant t ON t.id = r.tenant_id
     WHERE r.id = e.run_id AND r.tenant_id = e.tenant_id
       AND (r.status NOT IN ('succeeded', 'failed', 'cancelled') OR r.agent = 'langgraph'
            OR t.checkpoint_retention_days IS NULL
            OR r.finished_at >= %(now)s - make_interval(days => t.checkpoint_retention_days)))"""
# The other per-run rows stay as long as their run (conversation retention deletes it).
KEEP_WITH_RUN = """EXISTS (
    SELECT 1 FROM agents_run r WHERE r.id = e.run_id AND r.tenant_id = e.tenant_id)"""
TABLES: dict[str, tuple[str, str]] = {
    "agents_checkpoint": ("checkpoint_retention_days", KEEP_CHECKPOINT),
    "agents_runevent": ("conversation_retention_days", KEEP_WITH_RUN),
    "agents_stepattempt": ("conversation_retention_days", KEEP_WITH_RUN),
    "agents_toolcall": ("conversation_retention_days", KEEP_WITH_RUN),
    "agents_packedcontext": ("conversation_retention_days", KEEP_WITH_RUN),
}


def maintain(*, now: dt.datetime) -> dict[str, Any]:
    """Months made ahead and old months dropped, for every per-run table."""
    made = months_ahead(now=now)
    dropped = {table: drop_old_months(table, now=now) for table in TABLES}
    return {"made": made, "dropped": {t: d for t, d in dropped.items() if d["months"]}}


def months_ahead(*, now: dt.datetime) -> int:
    wanted = partitions.months_between(now, partitions.add_months(now, MONTHS_AHEAD))
    made = 0
    with system_scope("run_partitions") as ctx, connection.cursor() as cursor:
        for table in TABLES:
            made += partitions.ensure_months(cursor, table, "run_id", wanted)
        if made:
            ctx.record(made=made)
    return made


def drop_old_months(table: str, *, now: dt.datetime) -> dict[str, int]:
    """Drop the table's months past the shortest window; answers the months dropped and the
    rows they took and kept (moved to the default partition)."""
    window, keep = TABLES[table]
    done = {"months": 0, "deleted": 0, "kept": 0}
    with system_scope("run_partitions"), connection.cursor() as cursor:
        shortest = Tenant.objects.aggregate(days=Min(window))["days"]
        if shortest is None:
            return done  # every tenant keeps forever
        old = partitions.ended_by(cursor, table, now - dt.timedelta(days=shortest))
    for month in old:
        try:
            with system_scope("run_partitions") as ctx, connection.cursor() as cursor:
                gone, kept = partitions.drop_counted(
                    cursor, table, month, keep=keep, params={"now": now}
                )
                deleted = sum(gone.values())
                ctx.record(table=table, month=f"{month:%Y-%m}", deleted=deleted, kept=kept,
                           by_tenant=gone)  # fmt: skip
        except OperationalError:
            logger.warning("%s month %s not dropped this time: its lock was busy", table, month)
            continue
        done["months"] += 1
        done["deleted"] += deleted
        done["kept"] += kept
    return done
