"""API rate limits: per API key or per person, per tenant and bucket, counted in Redis.

A fixed window per rate: one INCR + EXPIRE in a MULTI, so concurrent requests on several
processes count exactly (DRF's cache throttles read, then write). Views name their bucket
with `rate_bucket = "write"` or per method, `rate_bucket = {"POST": "write"}`; anything
undeclared counts as "read". A tenant's `api_rate_limits` override the settings.

If Redis cannot be reached, requests are let through (logged at most once a minute) and
Redis is not asked again for a few seconds, so an outage costs neither errors nor latency.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

from core import redis_client
from tenants.rates import BUCKETS, LANGGRAPH, PER_TENANT, READ, WRITE, Rate, parse_rate

if TYPE_CHECKING:
    # Only types: DRF imports throttles while rest_framework.views loads, maybe before models.
    from tenants.models import Tenant
    from tenants.principal import Principal

logger = logging.getLogger(__name__)

SETTINGS = {
    READ: "API_RATE_LIMIT_READ",
    WRITE: "API_RATE_LIMIT_WRITE",
    LANGGRAPH: "API_RATE_LIMIT_LANGGRAPH",
}
# Rates of other doors, checked at startup like the API's.
OTHER_SETTINGS = ("PASSWORD_RESET_RATE_LIMIT", "PASSWORD_RESET_ADDRESS_RATE_LIMIT")
_PAUSE_SECONDS = 5.0
_WARN_EVERY_SECONDS = 60.0

_state_lock = threading.Lock()
_paused_until: dict[str, float] = {}
_warned_at: dict[str, float] = {}


class RateLimited(exceptions.Throttled):
    default_code = "rate_limited"

    def __init__(self, *, bucket: str, rate: Rate, who: str, wait: float) -> None:
        seconds = max(1, math.ceil(wait))
        super().__init__(
            detail=(
                f"Rate limit reached: {rate} {bucket} requests for this {who};"
                f" try again in {seconds} s."
            )
        )
        self.wait = seconds


def check_settings() -> None:
    """Refuse to start with a rate setting that does not parse, naming it."""
    for name in (*SETTINGS.values(), *OTHER_SETTINGS):
        try:
            parse_rate(getattr(settings, name))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from exc


def bucket_for(view: Any, method: str) -> str:
    declared = getattr(view, "rate_bucket", None)
    if isinstance(declared, dict):
        declared = declared.get(method.upper())
    bucket = declared or READ
    if bucket not in BUCKETS:
        raise ImproperlyConfigured(f"{view!r} declares an unknown rate bucket {bucket!r}")
    return bucket


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> Rate | None:
    return parse_rate(text)


def rate_for(tenant: Tenant, bucket: str) -> Rate | None:
    """The tenant's override for the bucket if it has one, else the setting; None: no limit."""
    override = (tenant.api_rate_limits or {}).get(bucket)
    if override is not None:
        try:
            return _parsed(override)
        except (ValueError, TypeError):
            # Written past the model's validator: the setting still protects the API.
            logger.warning("tenant %s has an invalid %s rate override", tenant.pk, bucket)
    return _parsed(getattr(settings, SETTINGS[bucket]))


def _count(key: str, window: int, amount: int = 1) -> int | None:
    """The count in its window after adding `amount`, or None when Redis cannot say."""
    url = settings.REDIS_URL
    now = time.monotonic()
    if now < _paused_until.get(url, 0.0):
        return None
    try:
        pipe = redis_client.client().pipeline(transaction=True)
        pipe.incr(key, amount)
        pipe.expire(key, window + 1)
        count, _ = pipe.execute()
        return int(count)
    except redis.RedisError:
        with _state_lock:
            _paused_until[url] = now + _PAUSE_SECONDS
            warn = now - _warned_at.get(url, -math.inf) >= _WARN_EVERY_SECONDS
            if warn:
                _warned_at[url] = now
        if warn:
            logger.warning(
                "Redis is unreachable: API rate limits are not enforced until it is back",
                exc_info=True,
            )
        return None


class ApiRateThrottle(BaseThrottle):
    """Counts each call of an API key (or of a person's console session) in its bucket."""

    def allow_request(self, request: Any, view: Any) -> bool:
        principal = getattr(request._request, "principal", None)
        if principal is None:
            return True  # not authenticated: nothing is done, and nobody to count
        count_call(principal, bucket_for(view, request.method))
        return True

    def wait(self) -> float | None:
        return None


def count_call(principal: Principal, bucket: str, amount: int = 1) -> None:
    """Count one call of this key (or person) in the bucket, as `amount` units (the steps of
    a batch of checkpoints); RateLimited past the rate. A per-tenant bucket counts every key
    and person of the tenant together.

    The REST API counts through ApiRateThrottle, the MCP server (memory/mcp/) per tool call.
    """
    rate = rate_for(principal.tenant, bucket)
    if rate is None or amount < 1:
        return
    now = time.time()
    who, key, window = _bucket_key(principal, bucket, rate, now)
    block = rate.limit // BLOCKS_PER_WINDOW if bucket in PER_TENANT else 0
    if block >= 2:
        if _reserved.take(key, amount):
            return
        count = _count(key, rate.window, amount + block)
        if count is None:
            return
        under = rate.limit - (count - amount - block)  # units of the window still free
        if under >= amount:
            _reserved.keep(key, min(block, under - amount), until=(window + 1) * rate.window)
            return
    else:
        count = _count(key, rate.window, amount)
        if count is None or count <= rate.limit:
            return
    raise RateLimited(bucket=bucket, rate=rate, who=who, wait=rate.window - now % rate.window)


def count_reserved(principal: Principal, bucket: str, amount: int = 1) -> bool:
    """Count the call from the units this process counted ahead in Redis, without a round
    trip: True when so counted (or the bucket has no limit); False when only `count_call` can
    count it (nothing was counted). The LangGraph door's step on the event loop counts so."""
    rate = rate_for(principal.tenant, bucket)
    if rate is None or amount < 1:
        return True
    if bucket not in PER_TENANT or rate.limit // BLOCKS_PER_WINDOW < 2:
        return False
    return _reserved.take(_bucket_key(principal, bucket, rate, time.time())[1], amount)


def _bucket_key(principal: Principal, bucket: str, rate: Rate, now: float) -> tuple[str, str, int]:
    """(who is counted, in words; the Redis key of the bucket's current window; the window)."""
    if bucket in PER_TENANT:
        who, subject = "tenant", "t"
    elif principal.api_key is not None:  # an integration's key, or a person's MCP token
        who = "token" if principal.personal_token else "API key"
        subject = f"k:{principal.api_key.pk}"
    else:
        who, subject = "person", f"u:{getattr(principal.user, 'pk', '')}"
    window = int(now // rate.window)
    return who, f"ratelimit:{principal.tenant.pk}:{bucket}:{subject}:{rate.window}:{window}", window


# A per-tenant bucket (a graph's steps, every step a call) is counted in blocks of a hundredth
# of its limit: a process counts a block ahead in Redis and hands it out itself, so most calls
# cost no round trip. What a process took and did not use by the window's end still counts, so
# a tenant at its limit may be refused up to a block per process early, never let past it. A
# limit under 200 a window is counted call by call.
BLOCKS_PER_WINDOW = 100


class _Reserved:
    """Units this process counted ahead, per bucket key (which names its window)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._left: dict[str, tuple[int, float]] = {}  # key: (units, when its window ends)

    def take(self, key: str, amount: int) -> bool:
        with self._lock:
            left, until = self._left.get(key, (0, 0.0))
            if left < amount:
                return False
            self._left[key] = (left - amount, until)
            return True

    def keep(self, key: str, units: int, *, until: float) -> None:
        now = time.time()
        with self._lock:
            for old in [k for k, (_, end) in self._left.items() if end <= now]:
                del self._left[old]  # windows that ended
            self._left[key] = (units, until)

    def clear(self) -> None:
        with self._lock:
            self._left.clear()


_reserved = _Reserved()


def hit(name: str, rate: Rate | None) -> float | None:
    """Count one event of `name` in its fixed window: the seconds to wait if it is over the
    rate, else None (also without a rate, and when Redis cannot say: limits fail open)."""
    if rate is None:
        return None
    now = time.time()
    window = int(now // rate.window)
    count = _count(f"ratelimit:{name}:{rate.window}:{window}", rate.window)
    if count is None or count <= rate.limit:
        return None
    return max(1.0, rate.window - now % rate.window)
