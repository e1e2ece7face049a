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
import re
from collections.abc import Iterable
from typing import Any

UTC = dt.UTC
_MONTH = re.compile(r"_p(\d{4})(\d{2})$")


def month_of(moment: dt.datetime) -> dt.datetime:
    """The first instant (UTC) of the month holding `moment`."""
    moment = moment.astimezone(UTC)
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


def create_default(cursor: Any, table: str) -> None:
    cursor.execute(f"CREATE TABLE {default_name(table)} PARTITION OF {table} DEFAULT")
    _same_policies(cursor, table, default_name(table))


def _create_month(cursor: Any, table: str, month: dt.datetime) -> None:
    cursor.execute(
        f"CREATE TABLE {month_name(table, month)} PARTITION OF {table}"
        f" FOR VALUES FROM ('{month.isoformat()}') TO ('{add_months(month, 1).isoformat()}')"
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
            [month, add_months(month, 1)],
        )
        if cursor.fetchone()[0]:
            _create_with_waiting_rows(cursor, table, column, month)
        else:
            _create_month(cursor, table, month)
        created += 1
    return created


def _create_with_waiting_rows(cursor: Any, table: str, column: str, month: dt.datetime) -> None:
    default = default_name(table)
    bounds = [month, add_months(month, 1)]
    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {default}")
    _create_month(cursor, table, month)
    cursor.execute(
        f"WITH moved AS (DELETE FROM {default} WHERE {column} >= %s AND {column} < %s"
        f" RETURNING *) INSERT INTO {month_name(table, month)} SELECT * FROM moved",
        bounds,
    )
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # a table with pending checks cannot be altered
    cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {default} DEFAULT")


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
