"""Tables partitioned by month: ranges created ahead, a DEFAULT partition for what falls outside
them, and whole months dropped once retention has passed them (docs/operations.md
"Retention by partition").

A table `t` partitioned by RANGE on a timestamp column has one partition per UTC month,
named `t_pYYYYMM` and holding [first of the month, first of the next), and `t_pdefault` for
rows outside every month created (a sweep that did not run for months, a clock far off, rows
kept after their month was dropped). The names say the bounds, so nothing parses catalog
expressions.

`ensure_months` creates the months a sweep wants ahead. Creating a month whose rows already
sit in the default partition would fail, so those rows are moved into the new month in the
same transaction (the default is detached meanwhile: writers wait for that transaction).
`drop_month` removes a month in one statement: no row-by-row DELETE, no dead tuples, a few
hundred bytes of WAL however many rows it held; what a caller must keep from it is moved
into the default partition first (`keep` below).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError

from core import ids

logger = logging.getLogger(__name__)

UTC = dt.UTC
_MONTH = re.compile(r"_p(\d{4})(\d{2})$")


def month_of(moment: dt.datetime) -> dt.datetime:
    """The first instant (UTC) of the month holding `moment`."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return dt.datetime(moment.year, moment.month, 1, tzinfo=UTC)


def add_months(month: dt.datetime, count: int) -> dt.datetime:
    index = month.year * 12 + month.month - 1 + count
    return dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def month_name(table: str, month: dt.datetime) -> str:
    return f"{table}_p{month:%Y%m}"


def default_name(table: str) -> str:
    return f"{table}_pdefault"


def months_between(first: dt.datetime, last: dt.datetime) -> list[dt.datetime]:
    """Every month from the one holding `first` to the one holding `last`, both included."""
    months, month = [], month_of(first)
    while month <= month_of(last):
        months.append(month)
        month = add_months(month, 1)
    return months


def months(cursor: Any, table: str) -> list[dt.datetime]:
    """The months `table` has a partition for, oldest first."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [table],
    )
    found = []
    for (name,) in cursor.fetchall():
        match = _MONTH.search(name)
        if match and name == month_name(table, _at(match)):
            found.append(_at(match))
    return sorted(found)


def _at(match: re.Match) -> dt.datetime:
    return dt.datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC)


def bound(column: str, month: dt.datetime) -> Any:
    """Where `month` starts in `column`: the instant for a time column; for `run_id`, a run
    id being a UUID v7 (core/ids.py), the lowest id made in that month."""
    return ids.lowest_at(month) if column == "run_id" else month


def _literal(column: str, month: dt.datetime) -> str:
    value = bound(column, month)
    return str(value) if column == "run_id" else value.isoformat()


def create_default(cursor: Any, table: str) -> None:
    cursor.execute(f"CREATE TABLE {default_name(table)} PARTITION OF {table} DEFAULT")
    _same_policies(cursor, table, default_name(table))


def _create_month(cursor: Any, table: str, column: str, month: dt.datetime) -> None:
    cursor.execute(
        f"CREATE TABLE {month_name(table, month)} PARTITION OF {table} FOR VALUES"
        f" FROM ('{_literal(column, month)}') TO ('{_literal(column, add_months(month, 1))}')"
    )
    _same_policies(cursor, table, month_name(table, month))


def secure_all(cursor: Any, table: str) -> None:
    """Give every partition of `table` the table's row-level security (after it was turned on)."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [table],
    )
    for (name,) in cursor.fetchall():
        _same_policies(cursor, table, name)


def _same_policies(cursor: Any, table: str, partition: str) -> None:
    """The parent's row-level security on the partition too: a query through the parent is
    checked by the parent's policies; one naming the partition (none of ours does) by these."""
    cursor.execute(
        "SELECT c.relrowsecurity, c.relforcerowsecurity FROM pg_class c WHERE c.oid = %s::regclass",
        [table],
    )
    enabled, forced = cursor.fetchone()
    if enabled:
        cursor.execute(f"ALTER TABLE {partition} ENABLE ROW LEVEL SECURITY")
    if forced:
        cursor.execute(f"ALTER TABLE {partition} FORCE ROW LEVEL SECURITY")
    cursor.execute(
        "SELECT policyname, permissive, cmd, qual, with_check FROM pg_policies"
        " WHERE schemaname = current_schema() AND tablename = %s",
        [table],
    )
    for name, permissive, cmd, qual, check in cursor.fetchall():
        cursor.execute(
            f'CREATE POLICY "{name}" ON {partition} AS {permissive} FOR {cmd}'
            + (f" USING ({qual})" if qual else "")
            + (f" WITH CHECK ({check})" if check else "")
        )


def ensure_months(cursor: Any, table: str, column: str, wanted: Iterable[dt.datetime]) -> int:
    """Create the partitions of the `wanted` months that `table` lacks (run in a transaction);
    rows of such a month waiting in the default partition move into it. Answers how many
    were created."""
    have = set(months(cursor, table))
    created = 0
    for month in sorted({month_of(m) for m in wanted} - have):
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {default_name(table)}"
            f" WHERE {column} >= %s AND {column} < %s)",
            [bound(column, month), bound(column, add_months(month, 1))],
        )
        if cursor.fetchone()[0]:
            _create_with_waiting_rows(cursor, table, column, month)
        else:
            _create_month(cursor, table, column, month)
        created += 1
    return created


def _create_with_waiting_rows(cursor: Any, table: str, column: str, month: dt.datetime) -> None:
    default = default_name(table)
    bounds = [bound(column, month), bound(column, add_months(month, 1))]
    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {default}")
    _create_month(cursor, table, column, month)
    cursor.execute(
        f"WITH moved AS (DELETE FROM {default} WHERE {column} >= %s AND {column} < %s"
        f" RETURNING *) INSERT INTO {month_name(table, month)} SELECT * FROM moved",
        bounds,
    )
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # a table with pending checks cannot be altered
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {default} DEFAULT")


def ended_by(cursor: Any, table: str, moment: dt.datetime) -> list[dt.datetime]:
    """The table's months that ended by `moment`, oldest first."""
    return [month for month in months(cursor, table) if add_months(month, 1) <= moment]


def drop_counted(
    cursor: Any, table: str, month: dt.datetime, *, keep: str, params: dict
) -> tuple[dict[str, int], int]:
    """Drop the month as `drop_month` does, after counting its rows: answers the rows dropped
    per tenant ("system" for rows of none) and the rows kept. They are counted before the
    table is locked, and copied under the lock only when some must stay (a month nobody keeps
    a row of drops at once). The lock is waited for 2 s at most: past that, OperationalError,
    and the month waits for the next sweep."""
    cursor.execute(
        f"SELECT coalesce(e.tenant_id::text, 'system'), {keep} AS kept, count(*)"
        f" FROM {month_name(table, month)} e GROUP BY 1, 2",
        params,
    )
    counts = cursor.fetchall()
    gone: dict[str, int] = {}
    for owner, kept, count in counts:
        if not kept:
            gone[owner] = gone.get(owner, 0) + count
    cursor.execute("SET LOCAL lock_timeout = '2s'")
    some = any(kept for _, kept, _ in counts)
    return gone, drop_month(cursor, table, month, keep=keep if some else "", params=params)


def drop_month(
    cursor: Any, table: str, month: dt.datetime, *, keep: str = "", params: dict | None = None
) -> int:
    """Drop the month's partition; `keep`, a condition on its rows (alias `e`, with named
    `params`), picks the rows moved into the default partition first. Run in a transaction:
    the table is locked (ACCESS EXCLUSIVE) until it ends. Answers how many rows were kept."""
    name = month_name(table, month)
    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
    kept = 0
    if keep:
        cursor.execute(
            f"INSERT INTO {default_name(table)} SELECT e.* FROM {name} e WHERE {keep}",
            params or {},
        )
        kept = cursor.rowcount
    cursor.execute(f"DROP TABLE {name}")
    return kept


def convert(
    cursor: Any,
    table: str,
    *,
    key: str,
    column: str | None = None,
    wanted: Iterable[dt.datetime] = (),
) -> None:
    """Rebuild `table` with every row (and id): partitioned by month of `column` (the months
    `wanted` and those of its rows, and a default partition), or, when `column` is None, as
    one plain table. Its columns, defaults, identity and checks come along (LIKE), and so do
    its indexes, unique and foreign keys, row-level security, policies and triggers, under
    the same names; the primary key becomes `key` (a partitioned table's must hold `column`).
    Run it in a transaction. Views over the table are the caller's (they follow the old one).
    """
    flat = f"{table}_flat"
    keys = _constraints(cursor, table)
    indexes = _lone_indexes(cursor, table)
    triggers = _triggers(cursor, table)
    cursor.execute(
        "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
        [table],
    )
    enabled, forced = cursor.fetchone()
    cursor.execute(
        "SELECT policyname, permissive, cmd, qual, with_check FROM pg_policies"
        " WHERE schemaname = current_schema() AND tablename = %s",
        [table],
    )
    policies = cursor.fetchall()
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    (sequence,) = cursor.fetchone()

    # The old table out of the way of every name (index names are per schema).
    cursor.execute(f"ALTER TABLE {table} RENAME TO {flat}")
    cursor.execute(f"ALTER TABLE {flat} NO FORCE ROW LEVEL SECURITY")
    cursor.execute(
        "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
        " WHERE x.indrelid = %s::regclass",
        [flat],
    )
    for (index,) in cursor.fetchall():
        cursor.execute(f'ALTER INDEX "{index}" RENAME TO "{(index + "_flat")[-63:]}"')
    if sequence:
        cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {flat}_id_seq")

    how = f" PARTITION BY RANGE ({column})" if column else ""
    cursor.execute(
        f"CREATE TABLE {table} (LIKE {flat} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
        f" INCLUDING IDENTITY INCLUDING GENERATED INCLUDING STORAGE){how}"
    )
    if column:
        create_default(cursor, table)
        cursor.execute(
            f"SELECT DISTINCT date_trunc('month', {_time_of(column)}) FROM {flat}"
            + (" WHERE substr(run_id::text, 15, 1) = '7'" if column == "run_id" else "")
        )
        months = [row[0] for row in cursor.fetchall() if row[0] is not None]
        ensure_months(cursor, table, column, [*wanted, *months])
    cursor.execute(f"INSERT INTO {table} SELECT * FROM {flat}")
    if sequence:
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), greatest("
            f"(SELECT max(id) FROM {table}), (SELECT last_value FROM {flat}_id_seq)))"
        )
    for name, kind, definition in keys:
        if kind == "p":
            definition = f"PRIMARY KEY ({key})"
        if kind == "f" and not definition.endswith(" NOT VALID"):
            definition += " NOT VALID"
        cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        if kind == "f":
            _validate(cursor, table, name)
    for definition in indexes:
        cursor.execute(definition.replace(" ON ONLY ", " ON "))
    if enabled:
        cursor.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    if forced:
        cursor.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    for name, permissive, cmd, qual, check in policies:
        cursor.execute(
            f'CREATE POLICY "{name}" ON {table} AS {permissive} FOR {cmd}'
            + (f" USING ({qual})" if qual else "")
            + (f" WITH CHECK ({check})" if check else "")
        )
    if column:
        secure_all(cursor, table)
    for definition in triggers:
        cursor.execute(definition)
    cursor.execute(f"DROP TABLE {flat}")


def _validate(cursor: Any, table: str, name: str) -> None:
    """Validate a foreign key added NOT VALID; rows that break it (a database whose keys were
    once bypassed, as bulk loaders do) leave it NOT VALID, as it truly was: new rows are
    checked either way."""
    cursor.execute("SAVEPOINT validate_key")
    try:
        cursor.execute(f'ALTER TABLE {table} VALIDATE CONSTRAINT "{name}"')
    except DatabaseError:
        cursor.execute("ROLLBACK TO SAVEPOINT validate_key")
        logger.warning("%s: rows break %s; it stays NOT VALID", table, name)
    cursor.execute("RELEASE SAVEPOINT validate_key")


def _time_of(column: str) -> str:
    """SQL for when a row's `column` says it belongs (a run id: when the run was made)."""
    if column != "run_id":
        return f"{column} AT TIME ZONE 'UTC'"
    # A UUID v7's first 48 bits are its Unix time in milliseconds. (Rows of runs made before
    # ids were time-ordered, random version 4 ids, make no month: they stay in the default
    # partition, but for the rare one that falls in a month's range.)
    return (
        "to_timestamp(('x' || lpad(substr(replace(run_id::text, '-', ''), 1, 12), 16, '0'))"
        "::bit(64)::bigint / 1000.0) AT TIME ZONE 'UTC'"
    )


def _constraints(cursor: Any, table: str) -> list[tuple[str, str, str]]:
    """(name, kind, definition) of the table's primary, unique and foreign keys."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'f') AND conparentid = 0"
        " ORDER BY contype DESC, conname",
        [table],
    )
    return cursor.fetchall()


def _lone_indexes(cursor: Any, table: str) -> list[str]:
    """CREATE INDEX statements of the table's indexes that back no constraint."""
    cursor.execute(
        "SELECT pg_get_indexdef(x.indexrelid) FROM pg_index x"
        " WHERE x.indrelid = %s::regclass"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid"
        "                 AND c.conrelid = x.indrelid)"
        " ORDER BY x.indexrelid",
        [table],
    )
    return [definition for (definition,) in cursor.fetchall()]


def _triggers(cursor: Any, table: str) -> list[str]:
    cursor.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgparentid = 0",
        [table],
    )
    return [definition for (definition,) in cursor.fetchall()]
