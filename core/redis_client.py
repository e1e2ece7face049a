"""Redis clients: `connect()` makes one for the configured Redis (REDIS_URL, or its current
primary through Sentinel when REDIS_SENTINELS is set: every client of the project is made
here, so all of them follow a failover); `client()` is the process's shared one for
request-path work (rate limits, liveness): short timeouts, no retries, since a request must
not wait long on a Redis that hangs: one attempt, then the caller decides (the rate limiter
fails open).
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}


def sentinel_options(redis_url: str) -> dict[str, Any]:
    """What REDIS_URL still says when Sentinel names the server: the database and password."""
    parts = urlsplit(redis_url)
    password = unquote(parts.password) if parts.password else None
    return {"db": int(parts.path.strip("/") or 0), "password": password}


def sentinel_broker_url(redis_url: str, sentinels: list[tuple[str, int]]) -> str:
    """Celery's broker URL for kombu's Sentinel transport: one sentinel:// URL per Sentinel,
    with REDIS_URL's password and database (the service is named in the transport options)."""
    given = sentinel_options(redis_url)
    auth = f":{quote(given['password'], safe='')}@" if given["password"] else ""
    return ";".join(f"sentinel://{auth}{host}:{port}/{given['db']}" for host, port in sentinels)


def connect(**options: Any) -> redis.Redis:
    """A new client (its own connection pool) of the configured Redis, with redis-py's
    `options` (timeouts, retry). Through Sentinel, its connections ask for the current
    primary when they connect, and one that finds a replica (a failover) reconnects."""
    if not settings.REDIS_SENTINELS:
        return redis.Redis.from_url(settings.REDIS_URL, **options)
    timeout = options.get("socket_connect_timeout") or options.get("socket_timeout") or 1.0
    sentinel = Sentinel(settings.REDIS_SENTINELS, socket_timeout=timeout)
    return sentinel.master_for(
        settings.REDIS_SENTINEL_MASTER, **sentinel_options(settings.REDIS_URL), **options
    )


def connection_pool(**options: Any) -> redis.ConnectionPool:
    """A connection pool of the configured Redis (a sender that holds one connection)."""
    return connect(**options).connection_pool


def client() -> redis.Redis:
    """The process's shared client (one connection pool, thread-safe)."""
    url = settings.REDIS_URL
    found = _clients.get(url)
    if found is None:
        with _lock:
            found = _clients.get(url)
            if found is None:
                found = connect(
                    socket_timeout=0.5,
                    socket_connect_timeout=0.5,
                    retry=Retry(NoBackoff(), 0),
                    health_check_interval=30,
                )
                _clients[url] = found
    return found
