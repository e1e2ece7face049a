"""The hot session cache: a thread's summary and recent messages (with their token counts)
in Redis, so a step builds its context without reading the transcript again.

PostgreSQL stays the source of truth. Keys name the tenant and the session. A write goes to
PostgreSQL first; after it commits, the cache is updated (messages appended in order) or
invalidated. A miss rebuilds from PostgreSQL. Every hit extends the TTL (the tenant's
`session_cache_ttl_seconds`, 1 h by default).

A rebuild races with writes: it reads a generation number before reading PostgreSQL and
stores its result only if no write bumped that number meanwhile, so a rebuild can never
put back a state older than a committed write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from agents.conversations.threads import ThreadState
from core.redis_client import connect as redis_connect

logger = logging.getLogger(__name__)

PREFIX = "agentstate:ctx:v1"

# KEYS: meta hash, message list, generation. Returns {1, state, messages} or {0, generation}.
_READ = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {0, redis.call('GET', KEYS[3]) or ''} end
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl'))
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return {1, state, redis.call('LRANGE', KEYS[2], 0, -1)}
"""

# ARGV: generation read before the rebuild, ttl, state, message count, messages...
# Returns 1 if stored, 0 if a write came in between (the rebuilt state may be stale).
_STORE = """
if (redis.call('GET', KEYS[3]) or '') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
for i = 5, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'ttl', ARGV[2], 'count', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""

# ARGV: position of the first new message, generation ttl, messages... Appends when the
# cached thread ends right before them; otherwise drops the entry (the next read rebuilds).
_APPEND = """
redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[2])
local count = redis.call('HGET', KEYS[1], 'count')
if not count then return 0 end
if tonumber(count) + 1 ~= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1], KEYS[2])
  return -1
end
local state = cjson.decode(redis.call('HGET', KEYS[1], 'state'))
local n = #ARGV - 2
state['count'] = tonumber(count) + n
for i = 3, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[1], 'count', tonumber(count) + n, 'state', cjson.encode(state))
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl'))
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
"""

# ARGV: generation ttl.
_INVALIDATE = """
redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1], KEYS[2])
"""

_client: redis.Redis | None = None
_scripts: dict[str, Any] = {}


def client() -> redis.Redis:
    global _client
    if _client is None:
        # Short timeouts and one retry: without Redis a step reads PostgreSQL instead of waiting.
        _client = redis_connect(
            socket_timeout=2,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 1),
        )
    return _client


def _script(source: str) -> Any:
    if source not in _scripts:
        _scripts[source] = client().register_script(source)
    return _scripts[source]


def keys(tenant_id: Any, session_id: Any) -> list[str]:
    base = f"{PREFIX}:{tenant_id}:{session_id}"
    return [f"{base}:meta", f"{base}:msgs", f"{base}:gen"]


def enabled() -> bool:
    return bool(getattr(settings, "AGENTSTATE_SESSION_CACHE", True))


def _generation_ttl() -> int:
    # Longer than any rebuild takes; a day covers every tenant's TTL setting in practice.
    return 86_400


def load(
    *, tenant_id: Any, session_id: Any, rebuild: Callable[[], ThreadState | None]
) -> tuple[ThreadState | None, bool]:
    """The thread from the cache (hit: True), else from `rebuild()`, stored for next time."""
    if not enabled():
        return rebuild(), False
    k = keys(tenant_id, session_id)
    try:
        found = _script(_READ)(keys=k)
    except redis.RedisError as exc:
        logger.warning("session cache unavailable (%s); reading PostgreSQL", exc)
        return rebuild(), False
    if found[0] == 1:
        state = json.loads(found[1])
        return ThreadState(**state, messages=[json.loads(m) for m in found[2]]), True
    generation = found[1].decode() if isinstance(found[1], bytes) else str(found[1] or "")
    thread = rebuild()
    if thread is not None:
        _store(k, generation, thread)
    return thread, False


def _store(k: list[str], generation: str, thread: ThreadState) -> None:
    args = [generation, thread.ttl, json.dumps(thread.as_json()), thread.count]
    args += [json.dumps(m, separators=(",", ":")) for m in thread.messages]
    try:
        _script(_STORE)(keys=k, args=args)
    except redis.RedisError as exc:
        logger.warning("session cache not updated (%s)", exc)


def messages_appended(*, tenant_id: Any, session_id: Any, messages: list[dict[str, Any]]) -> None:
    """After a commit that appended `messages` (with `pos`) to the thread: append or drop."""
    if not enabled() or not messages:
        return
    args = [messages[0]["pos"], _generation_ttl()]
    args += [json.dumps(m, separators=(",", ":")) for m in messages]
    try:
        _script(_APPEND)(keys=keys(tenant_id, session_id), args=args)
    except redis.RedisError as exc:
        logger.warning("session cache not updated after a write (%s)", exc)


def invalidate(*, tenant_id: Any, session_id: Any) -> None:
    """After a commit that changed the thread other than by appending (summary, deletion)."""
    if not enabled():
        return
    try:
        _script(_INVALIDATE)(keys=keys(tenant_id, session_id), args=[_generation_ttl()])
    except redis.RedisError as exc:
        logger.warning("session cache not invalidated (%s)", exc)
