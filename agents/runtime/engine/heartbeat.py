"""Keep the leases of this process's drives alive while their steps run (an LLM call, a slow
tool, or many short steps that together outlast the lease).

One daemon thread per process renews every lease held here, each a third of its length after
it was taken or last renewed: holding a lease costs a drive a set insert and remove, not a
thread of its own (starting and joining one cost every drive a wake-up of a new thread).
Drives that finish within a third of the lease never cost the thread a database connection,
and it closes its connection after each round of renewals.
A renewal names the version it was told about and the worker, so it cannot extend a lease
that another worker has taken over.

A second thread says the process is alive (agents/runtime/liveness.py): once the process has
held a lease, it sets the worker's liveness key every third of AGENTSTATE_LIVENESS_SECONDS,
so the recovery sweep takes back the runs of a process that died (or froze) within seconds.
A step that computes for long still lets it run (the GIL switches every few ms).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection

from agents.runtime import liveness
from core import sql
from core.per_process import PerProcess

logger = logging.getLogger(__name__)

RENEW_SQL = sql.load("agents.runtime", "renew_lease")


class Lease:
    """A lease this process holds: renewed by the keeper until released."""

    def __init__(self, *, tenant_id: str, run_id: Any, worker: str, lease: float) -> None:
        self.params: dict[str, Any] = {
            "tenant": tenant_id,
            "run": str(run_id),
            "worker": worker,
            "lease": lease,
            "version": 0,
        }
        self.interval = lease / 3
        self.due = math.inf

    def hold(self, version: int) -> Lease:
        self.params["version"] = version
        _keeper().hold(self)
        return self

    def version(self, version: int) -> None:
        """The run's version after this process's latest write (the fencing token)."""
        self.params["version"] = version

    def release(self) -> None:
        _keeper().release(self)


class _Keeper:
    def __init__(self) -> None:
        self.held: set[Lease] = set()
        self.changed = threading.Condition()
        self.wakes_at = math.inf  # when the thread wakes next on its own
        self.workers: set[str] = set()  # worker ids this process has held leases as
        self.beat_now = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self.thread.start()
        # Beats on a thread of their own: a renewal waiting on the database (a lock, a slow
        # connect) must not make a live process look dead.
        self.beater = threading.Thread(target=self._beat, name="liveness-beat", daemon=True)
        self.beater.start()

    def hold(self, lease: Lease) -> None:
        with self.changed:
            lease.due = time.monotonic() + lease.interval
            self.held.add(lease)
            if lease.params["worker"] not in self.workers:  # say it is alive right away
                self.workers.add(lease.params["worker"])
                self.beat_now.set()
            # Leases of one process are usually equally long, so a new one falls due after
            # the one the thread sleeps for: it is woken only when it would be late.
            if lease.due < self.wakes_at:
                self.changed.notify()

    def release(self, lease: Lease) -> None:
        with self.changed:
            self.held.discard(lease)

    def _run(self) -> None:
        idle = 60.0  # with nothing held, look again after the last interval seen (or a minute)
        while True:
            with self.changed:
                now = time.monotonic()
                due = [lease for lease in self.held if lease.due <= now]
                for lease in due:
                    lease.due = now + lease.interval
                    idle = lease.interval
                self.wakes_at = min((lease.due for lease in self.held), default=now + idle)
                if not due:
                    self.changed.wait(self.wakes_at - now)
                    continue
            try:
                for lease in due:
                    if lease in self.held:  # not released meanwhile (its drive ended)
                        self._renew(lease)
            finally:
                # Renewals are a third of a lease apart: holding a connection open between
                # them would cost every worker process an idle session for nothing.
                connection.close()

    def _beat(self) -> None:
        interval = settings.AGENTSTATE_LIVENESS_SECONDS / 3
        while True:
            self.beat_now.wait(interval)
            self.beat_now.clear()
            with self.changed:
                workers = list(self.workers)
            if workers:
                liveness.beat(workers)

    def _renew(self, lease: Lease) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(RENEW_SQL, dict(lease.params))
        except Exception:  # noqa: BLE001 - a missed beat only shortens the lease
            logger.warning("lease renewal for run %s failed", lease.params["run"], exc_info=True)
            connection.close()  # the next renewal starts on a new connection


_keeper = PerProcess(_Keeper).get
