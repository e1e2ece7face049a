"""One active process among several: a lease in PostgreSQL (core_leaderlease) that the active
one renews and a standby takes once it has expired, as runs' leases are. Celery beat runs
behind it (config/beat.py), so any number of beat instances can run and one sends the
schedule; if it dies, another takes over within the lease's length.

The database is the authority, as for runs: a holder that cannot reach it stops acting as
the holder at once (its lease runs out meanwhile), and the sweeps beat sends are idempotent
should two overlap around a hand-over.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid

from django.db import connection

from core import sql

logger = logging.getLogger(__name__)

HOLD_SQL = sql.load("core", "leader_hold")
RELEASE_SQL = sql.load("core", "leader_release")


def holder_id() -> str:
    """This process, as a lease names it: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def hold(name: str, holder: str, seconds: float) -> bool:
    """Take or renew the lease `name` for `seconds`; whether `holder` has it now. False when
    the database does not answer (the connection is dropped, to be made anew next time)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(HOLD_SQL, {"name": name, "holder": holder, "ttl": seconds})
            return cursor.fetchone() is not None
    except Exception as exc:  # noqa: BLE001 - not the holder until the database says so
        logger.warning("lease %s: the database did not answer (%s)", name, exc)
        connection.close()
        return False


def release(name: str, holder: str) -> None:
    """Give the lease up now (a clean shutdown)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(RELEASE_SQL, {"name": name, "holder": holder})
    except Exception as exc:  # noqa: BLE001 - it expires by itself
        logger.warning("lease %s not released (%s)", name, exc)
