"""Emptying the test database after a transactional test, in milliseconds.

pytest-django ends each transactional test (about 480 of them) with Django's `flush`: one
TRUNCATE of every table. TRUNCATE gives every table, partition and index it names a new file,
and here that took 0.3-0.45 s, mostly for tables the test never wrote. On the embedded
PostgreSQL the test session started (config/embedded.py), `delete_all_rows` deletes the rows
instead, as its superuser with `session_replication_role = replica`: row-level security hides
no row from it, and neither foreign keys nor triggers fire (each referencing table is emptied
in the same transaction, and what a trigger would maintain goes with it). Only tables that
have a page are named: a table whose main fork has none has held no row since it was made (a
row, even one rolled back or still uncommitted in another process, needs a page). Django's own
catalog (content types, permissions) stays: flush would empty it and its post_migrate handlers
fill it again with the same rows, and no test writes it.

Given servers by URL instead, Django's flush runs as before.
"""

from __future__ import annotations

import psycopg
from django.db import connections

_KEPT = frozenset({"django_content_type", "auth_permission"})
_WRITTEN_SQL = (
    "SELECT name FROM unnest(%s::text[]) AS name"
    " WHERE pg_relation_size(quote_ident(name)::regclass) > 0 OR EXISTS ("
    "  SELECT FROM pg_partition_tree(quote_ident(name)::regclass) AS part"
    "  WHERE pg_relation_size(part.relid) > 0)"
)
_superuser: dict[str, psycopg.Connection] = {}


def delete_all_rows(alias: str) -> bool:
    """Empty the database of connection `alias` as flush would; False where this cannot be
    done (not the embedded server), and the caller flushes."""
    connection = connections[alias]
    url = _superuser_url(connection.settings_dict)
    if url is None:
        return False
    tables = [
        name
        for name in connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        if name not in _KEPT
    ]
    try:
        _empty(_connect(url), tables)
    except psycopg.errors.TransactionRollback:
        raise  # a deadlock: the caller tries again on this connection
    except psycopg.OperationalError:  # the server was restarted by the test: once more
        _superuser.pop(url, None)
        _empty(_connect(url), tables)
    return True


def _empty(conn: psycopg.Connection, tables: list[str]) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        written = [name for (name,) in conn.execute(_WRITTEN_SQL, [tables])]
        for name in written:
            conn.execute(f'DELETE FROM "{name}"')


def _connect(url: str) -> psycopg.Connection:
    conn = _superuser.get(url)
    if conn is None or conn.closed or conn.broken:
        conn = _superuser[url] = psycopg.connect(url, autocommit=True)
    return conn


def _superuser_url(settings_dict: dict) -> str | None:
    from config import embedded

    info = embedded._pg_info()
    if info is None or str(settings_dict.get("PORT")) != str(info.port):
        return None
    if settings_dict.get("HOST") not in ("127.0.0.1", "localhost"):
        return None
    return info.super_url.rsplit("/", 1)[0] + "/" + settings_dict["NAME"]


def close() -> None:
    for conn in _superuser.values():
        conn.close()
    _superuser.clear()
