"""A persist sent without waiting for its answer, so the next step's Python runs while the
server commits the previous one (agents/runtime/engine/runner.py, "the pipelined step").

`send()` puts the persist on the connection (a named prepared statement, parameters as
text) and returns at once; `receive()` waits for its answer. In between the connection
is busy: nothing else may use it, which the runner makes sure of (it reads the answer
before the step touches anything outside the process). It is libpq's own asynchronous
interface (`PQsendQueryPrepared`, `PQgetResult`) through psycopg's `pq` wrapper, on the
connection Django holds; psycopg's cursor has no way to send a statement and come back for
its result later.

Errors are psycopg's, raised inside Django's `wrap_database_errors` (so Django translates
them and marks a broken connection, as its own cursors do), and a connection that answered
an error is left ready for the next statement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import select
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import errors, pq

# SQLSTATE of a prepared statement the session no longer has (DEALLOCATE ALL, DISCARD ALL,
# a pooler that moved us to another server connection): prepared again and sent once more.
_STATEMENT_GONE = "26000"
_ALREADY_PREPARED = "42P05"  # duplicate_prepared_statement


class Statement:
    """A statement written with %(name)s parameters, prepared once per connection."""

    def __init__(self, text: str) -> None:
        self.names: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.names:
                self.names.append(name)
            return f"${self.names.index(name) + 1}"

        self.text = re.sub(r"%\((\w+)\)s", number, text).encode()
        digest = hashlib.sha1(self.text, usedforsecurity=False).hexdigest()[:12]
        self.name = f"agentstate_{digest}".encode()

    def values(self, params: dict[str, Any]) -> list[bytes | None]:
        return [_text(params[name]) for name in self.names]


@dataclass
class Sent:
    """A statement on its way: `receive()` reads its answer (once)."""

    db: BaseDatabaseWrapper
    pgconn: pq.abc.PGconn
    statement: Statement
    values: list[bytes | None]


_thread = threading.local()


def send(db: BaseDatabaseWrapper, statement: Statement, values: list[bytes | None]) -> Sent:
    """Send `statement` with its parameters' `values` (`Statement.values`) on `db`'s
    connection (autocommit: its own transaction) and return without waiting for the server."""
    if db.connection is None:  # (ensure_connection costs a step 5 us when connected)
        db.ensure_connection()
    with db.wrap_database_errors:
        conn: psycopg.Connection = db.connection
        pgconn = conn.pgconn
        _prepare(conn, statement)
        pgconn.send_query_prepared(statement.name, values)
        _flush(pgconn)
    return Sent(db, pgconn, statement, values)


def receive(sent: Sent) -> tuple[bytes | None, ...] | None:
    """The first row of the answer to `sent` (its columns as text), None for no row."""
    with sent.db.wrap_database_errors:
        result = _answer(sent.pgconn)
        if result.status == pq.ExecStatus.FATAL_ERROR:
            error = errors.error_from_result(result, encoding=_encoding(sent.db))
            if error.sqlstate != _STATEMENT_GONE:
                raise error
            # Prepared again, and sent again, waiting this time.
            _forget(sent.db.connection)
            _prepare(sent.db.connection, sent.statement)
            sent.pgconn.send_query_prepared(sent.statement.name, sent.values)
            _flush(sent.pgconn)
            result = _answer(sent.pgconn)
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise errors.error_from_result(result, encoding=_encoding(sent.db))
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise psycopg.ProgrammingError(f"unexpected answer {result.status!r} to a persist")
        if not result.ntuples:
            return None
        return tuple(result.get_value(0, column) for column in range(result.nfields))


def _text(value: Any) -> bytes | None:
    """A parameter as PostgreSQL's text input takes it (sent untyped: the server gives it the
    type of the function argument it fills)."""
    if value is None:
        return None
    if isinstance(value, str):
        encoded = value.encode()
        if b"\x00" in encoded:  # libpq would cut the text there
            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        return encoded
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int | float):
        return repr(value).encode()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise psycopg.DataError(f"a naive datetime has no time zone: {value!r}")
        return value.isoformat().encode()
    if isinstance(value, uuid.UUID):
        return str(value).encode()
    raise psycopg.ProgrammingError(f"cannot send {type(value).__name__} as a persist parameter")


def _prepare(conn: psycopg.Connection, statement: Statement) -> None:
    prepared = _prepared(conn)
    if statement.name in prepared:
        return
    pgconn = conn.pgconn
    pgconn.send_prepare(statement.name, statement.text)
    _flush(pgconn)
    result = _answer(pgconn)
    if result.status == pq.ExecStatus.FATAL_ERROR:
        error = errors.error_from_result(result, encoding=conn.info.encoding)
        # The session has it already: the name is the text's digest, so it is this statement.
        if error.sqlstate != _ALREADY_PREPARED:
            raise error
    prepared.add(statement.name)


# Names prepared on each connection (a new connection, a new session, has none).
_by_connection: weakref.WeakKeyDictionary[psycopg.Connection, set[bytes]] = (
    weakref.WeakKeyDictionary()
)


def _prepared(conn: psycopg.Connection) -> set[bytes]:
    names = _by_connection.get(conn)
    if names is None:
        names = _by_connection[conn] = set()
    return names


def _forget(conn: psycopg.Connection) -> None:
    _prepared(conn).clear()


def _flush(pgconn: pq.abc.PGconn) -> None:
    """Push what libpq buffered (psycopg's connections are non-blocking) onto the socket."""
    while pgconn.flush():
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLOUT)
        if any(events & select.POLLIN for _, events in poller.poll()):
            pgconn.consume_input()


def _answer(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """Wait (without holding the GIL) for the answer to the statement sent, and read it all:
    its result, and the end of it, so the connection is free again."""
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        _readable(pgconn.socket).poll()
    result = pgconn.get_result()
    if result is None:
        raise psycopg.InterfaceError("the server sent no answer to a persist")
    while (extra := pgconn.get_result()) is not None:
        if extra.status == pq.ExecStatus.FATAL_ERROR and result.status != extra.status:
            result = extra
    return result


def _readable(fd: int) -> Any:
    """This thread's poll object waiting for `fd` to be readable (poll, not select: a
    process with a thousand sockets has descriptors past select's 1,024)."""
    if getattr(_thread, "poll_fd", None) != fd:
        _thread.poller = select.poll()
        _thread.poller.register(fd, select.POLLIN)
        _thread.poll_fd = fd
    return _thread.poller


def _encoding(db: BaseDatabaseWrapper) -> str:
    return db.connection.info.encoding
