"""Which worker processes are alive: a Redis key per process, kept fresh by its lease keeper.

A worker process that holds runs sets `agentstate:alive:<worker>` every third of
AGENTSTATE_LIVENESS_SECONDS with that expiry (agents/runtime/engine/heartbeat.py). The
recovery sweep asks for the keys of every worker holding a run; a missing key means the
process died (or froze: a stopped process stops its keeper too), so its runs are taken back
within seconds instead of when their leases expire. The database lease stays the authority:
a worker declared dead that was only slow finds its writes fenced off by the run's version.

When Redis restarted within the last expiry, keys may be missing for live workers: the sweep
then trusts leases alone for that round. Likewise after a failover (Redis Sentinel promoted a
replica: another server, whose copies of the keys may have expired while the old primary was
down): for twice the expiry after this process first sees a server it did not see before, so
that live workers have reconnected and beaten into it. When Redis does not answer, likewise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from django.conf import settings

from core.redis_client import client

logger = logging.getLogger(__name__)

PREFIX = "agentstate:alive:"
SEEN_PREFIX = "agentstate:seen:"  # when the worker last beat, kept a day after it stops
SEEN_TTL_SECONDS = 86400
_last_warned = 0.0
# The Redis server this process last asked (its run_id), and when it first saw it.
_server: dict[str, object] = {"run_id": None, "since": 0.0}


def key(worker: str) -> str:
    return PREFIX + worker


def beat(workers: Iterable[str]) -> bool:
    """Say these workers (of this process) are alive; False when Redis did not answer."""
    try:  # (the settings too: a beat that raises would end the beating thread)
        ttl_ms = int(settings.AGENTSTATE_LIVENESS_SECONDS * 1000)
        now = str(time.time())
        pipe = client().pipeline(transaction=False)
        for worker in workers:
            pipe.set(key(worker), now, px=ttl_ms)
            pipe.set(SEEN_PREFIX + worker, now, ex=SEEN_TTL_SECONDS)
        pipe.execute()
        return True
    except Exception as exc:  # noqa: BLE001 - a missed beat only lets the lease decide
        _warn("liveness beat failed (%s); leases alone decide meanwhile", exc)
        return False


def forget(worker: str) -> None:
    """This worker is known dead (its process is gone): stop vouching for it now."""
    try:
        client().delete(key(worker))
    except Exception as exc:  # noqa: BLE001
        _warn("could not clear liveness of %s (%s)", worker, exc)


def last_seen(workers: list[str]) -> dict[str, datetime]:
    """When each of these workers last beat (those never seen, or all when Redis cannot
    tell, are left out)."""
    if not workers:
        return {}
    try:
        found = client().mget([SEEN_PREFIX + w for w in workers])
    except Exception as exc:  # noqa: BLE001
        _warn("liveness unknown (%s)", exc)
        return {}
    return {
        w: datetime.fromtimestamp(float(s), UTC) for w, s in zip(workers, found, strict=True) if s
    }


def dead_among(workers: list[str]) -> list[str]:
    """The workers whose liveness key is missing; none when Redis cannot tell."""
    if not workers:
        return []
    try:
        redis = client()
        server = redis.info("server")
        if not _trusted(server):
            return []  # restarted or failed over recently: live workers may not have beaten since
        alive = redis.mget([key(w) for w in workers])
    except Exception as exc:  # noqa: BLE001
        _warn("liveness unknown (%s); leases alone decide", exc)
        return []
    return [w for w, v in zip(workers, alive, strict=True) if v is None]


def _trusted(server: dict) -> bool:
    """Whether this Redis server has had time to hear every live worker's beat."""
    expiry = settings.AGENTSTATE_LIVENESS_SECONDS
    if int(server.get("uptime_in_seconds", 0)) < expiry:
        return False
    now, run_id = time.monotonic(), server.get("run_id")
    if _server["run_id"] is None:  # the first server this process asks: as it was
        _server.update(run_id=run_id, since=now - 2 * expiry)
    elif run_id != _server["run_id"]:
        logger.warning(
            "Redis is another server now (a failover?): leases alone decide for %ss", 2 * expiry
        )
        _server.update(run_id=run_id, since=now)
    return now - float(_server["since"]) >= 2 * expiry  # type: ignore[arg-type]


def _warn(message: str, *args: object) -> None:
    global _last_warned
    now = time.monotonic()
    if now - _last_warned > 10:  # an outage fails every beat: say so once in a while
        _last_warned = now
        logger.warning(message, *args)
