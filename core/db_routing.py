"""Reads that may lag go to a replica (optional: `DATABASE_REPLICA_URL`).

Everything reads and writes the primary (`default`) unless a view opts in with
`tenants.replica.replica_reads`: inside it, the router sends the ORM's reads to the `replica`
alias, whose transaction carries the request's tenant like the primary's. Writes always go
to the primary, and nothing is ever migrated on the replica (it follows the primary's WAL).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from django.conf import settings

REPLICA = "replica"
_reads_from: ContextVar[str | None] = ContextVar("agentstate_reads_from", default=None)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


@contextlib.contextmanager
def reads_from(alias: str) -> Iterator[None]:
    """The ORM's reads in this block (this thread or task) go to `alias`."""
    token = _reads_from.set(alias)
    try:
        yield
    finally:
        _reads_from.reset(token)


class ReplicaRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _reads_from.get()

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return None  # the primary

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return True  # the replica holds the primary's rows: objects of both may relate

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db != REPLICA
