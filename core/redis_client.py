"""A Redis client for request-path work (rate limits): short timeouts, no retries.

The tenants layer may not import the agents' clients, and a request must not wait long on
a Redis that hangs: one attempt, then the caller decides (the rate limiter fails open).
"""

from __future__ import annotations

import threading

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}


def client() -> redis.Redis:
    """The process's client for settings.REDIS_URL (one connection pool, thread-safe)."""
    url = settings.REDIS_URL
    found = _clients.get(url)
    if found is None:
        with _lock:
            found = _clients.get(url)
            if found is None:
                found = redis.Redis.from_url(
                    url,
                    socket_timeout=0.5,
                    socket_connect_timeout=0.5,
                    retry=Retry(NoBackoff(), 0),
                    health_check_interval=30,
                )
                _clients[url] = found
    return found
