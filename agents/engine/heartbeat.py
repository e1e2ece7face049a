"""Keep a run's lease alive while a long step (an LLM call, a slow tool) is running.

The thread sleeps first: drives that finish within a third of the lease never open its
database connection. It renews only the version it was told about, so it cannot extend a
lease that another worker has taken over.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connection

logger = logging.getLogger(__name__)

RENEW_SQL = """
SELECT set_config('app.tenant_id', %(tenant)s, true);
UPDATE agents_run SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
 WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
"""


class Heartbeat:
    def __init__(self, *, tenant_id: str, run_id: Any, worker: str, lease: float) -> None:
        self.params: dict[str, Any] = {
            "tenant": tenant_id,
            "run": str(run_id),
            "worker": worker,
            "lease": lease,
            "version": 0,
        }
        self.interval = lease / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{run_id}", daemon=True)

    def start(self, version: int) -> Heartbeat:
        self.params["version"] = version
        self._thread.start()
        return self

    def version(self, version: int) -> None:
        self.params["version"] = version

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        renewed = False
        try:
            while not self._stop.wait(self.interval):
                renewed = True
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(RENEW_SQL, dict(self.params))
                except Exception:  # noqa: BLE001 - a missed beat only shortens the lease
                    logger.warning(
                        "lease renewal for run %s failed", self.params["run"], exc_info=True
                    )
        finally:
            if renewed:  # only then has this thread a connection of its own to close
                connection.close()
