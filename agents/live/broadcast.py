"""Fan progress events out to websocket consumers through Redis pub/sub.

`broadcast(event)` is an `agents.runtime.progress` subscriber, so it runs after the commit. It only
queues the event: one sender thread per process publishes the queue on its own redis-py
connection, a batch's PUBLISH commands pipelined (one round trip), to the Redis channels on
which the pub/sub channel layer (`channels_redis.pubsub`) has the consumers subscribed. The
engine thread never waits for Redis, and a Redis hiccup loses at most a live message: the
batch is logged and dropped, and pages read what they missed from agents_runevent on the next
event or reconnect.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
import redis.sentinel
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from redis.connection import ConnectionInterface

from core.per_process import PerProcess

logger = logging.getLogger(__name__)

MESSAGE_TYPE = "live.event"  # handled by LiveConsumer.live_event
MIN_INTERVAL = 0.01  # seconds the sender rests after each batch (events coalesce meanwhile)
RETRY_INTERVAL = 1.0  # ... after a failed one (so at most one warning a second)
PUBSUB_LAYER = "channels_redis.pubsub.RedisPubSubChannelLayer"
# Sent to the tenant's feeds (runs list, approvals) as well as the run's own group.
TENANT_KINDS = frozenset(
    {
        "run.queued",
        "run.status",
        "run.lost",
        "step.started",
        "step.finished",
        "step.failed",
        "approval.requested",
        "approval.decided",
        "approval.escalated",
    }
)
# What a consumer needs from an event; it reads everything else from the database.
FIELDS = ("tenant_id", "run_id", "kind", "seq", "after", "status", "request_id", "text", "ok")


def run_group(run_id: Any) -> str:
    return f"run.{run_id}"


def tenant_group(tenant_id: Any) -> str:
    return f"tenant.{tenant_id}"


def groups_for(event: dict[str, Any]) -> list[str]:
    if not event.get("run_id"):
        return []
    groups = [run_group(event["run_id"])]
    # A step that hands over to the next one inside the same slice changes no status: the
    # runs list hears of the run when it is claimed, pauses, fails or ends, not every step.
    between_steps = event["kind"] == "step.finished" and event.get("status") == "running"
    if event["kind"] in TENANT_KINDS and not between_steps:
        groups.append(tenant_group(event["tenant_id"]))
    return groups


def broadcast(event: dict[str, Any]) -> None:
    """Queue the event for every group that shows it (called after commit, on the engine's
    thread: a deque append; which groups, and what of the event they get, is worked out by
    the sender thread)."""
    _sender().put(event)


def message_for(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": MESSAGE_TYPE, **{k: event[k] for k in FIELDS if k in event}}


@dataclass(frozen=True)
class Target:
    """Where the channel layer's consumers listen: one Redis host, channels named
    `{prefix}__group__{group}` (as RedisPubSubLoopLayer names them)."""

    prefix: str
    host: dict[str, Any]  # an entry of the layer's "hosts", as channels_redis decodes it

    def channel(self, group: str) -> str:
        return f"{self.prefix}__group__{group}"


def target() -> Target:
    """The default channel layer's Redis, or ImproperlyConfigured for one we cannot publish to."""
    from channels.layers import DEFAULT_CHANNEL_LAYER
    from channels_redis.pubsub import RedisPubSubChannelLayer
    from channels_redis.utils import decode_hosts

    layer: dict[str, Any] = settings.CHANNEL_LAYERS.get(DEFAULT_CHANNEL_LAYER, {})
    backend = str(layer.get("BACKEND", ""))
    try:
        pubsub = issubclass(import_string(backend), RedisPubSubChannelLayer)
    except ImportError:
        pubsub = False
    if not pubsub:
        raise ImproperlyConfigured(
            f"CHANNEL_LAYERS[{DEFAULT_CHANNEL_LAYER!r}] uses {backend!r}: live progress is "
            f"published with Redis PUBLISH, which only {PUBSUB_LAYER} delivers."
        )
    config = layer.get("CONFIG", {})
    hosts = decode_hosts(config.get("hosts"))
    if len(hosts) != 1:
        raise ImproperlyConfigured(
            f"CHANNEL_LAYERS[{DEFAULT_CHANNEL_LAYER!r}] lists {len(hosts)} Redis hosts: the "
            "live sender publishes to one (the pub/sub layer would spread groups over several "
            "by a hash of their names). Use one Redis host for the channel layer."
        )
    return Target(prefix=config.get("prefix", "asgi"), host=hosts[0])


target()  # a misconfigured layer fails at startup (the ASGI app imports this module)


def _connection(host: dict[str, Any]) -> ConnectionInterface:
    """A connection to the layer's Redis; it connects when it first sends. Through Sentinel
    (`sentinels` and `master_name`, as channels-redis takes them) it asks for the current
    primary whenever it connects, so after a failed batch the next one goes to the new one."""
    options = {key: value for key, value in host.items() if key != "address"}
    if "sentinels" in options:
        sentinels, name = options.pop("sentinels"), options.pop("master_name")
        options.pop("sentinel_kwargs", None)
        timeout = options.get("socket_timeout") or 1.0
        sentinel = redis.sentinel.Sentinel(sentinels, socket_timeout=timeout)
        pool = sentinel.master_for(name, **options).connection_pool
    elif "address" in host:
        pool = redis.ConnectionPool.from_url(host["address"], **options)
    else:
        pool = redis.ConnectionPool(**options)
    return pool.make_connection()


class _Sender:
    """Sends the latest message per (group, run): a consumer reads what it missed from the
    database, so when events queue up faster than Redis takes them, only the newest of a
    run needs to go out. The engine thread only appends the event to a deque and, if the
    sender is idle, wakes it; everything else happens on the sender's thread."""

    def __init__(self, where: Target) -> None:
        from channels.layers import get_channel_layer

        self.target = where
        # The layer's own serializer: msgpack, or whatever the layer's CONFIG chose.
        self.serialize = get_channel_layer().serialize
        self.connection = _connection(where.host)  # only the sender thread uses it
        # Events, and flush() markers (an Event set once everything queued before it is
        # sent or dropped). deque.append and popleft are atomic: the engine takes no lock.
        self.queue: collections.deque[dict[str, Any] | threading.Event] = collections.deque()
        self.wake = threading.Event()
        self.idle = False  # written by the sender thread only
        self.handled = 0  # events sent or dropped so far (sender thread only)
        self.thread = threading.Thread(target=self._run, name="live-broadcast", daemon=True)
        self.thread.start()

    def put(self, event: dict[str, Any]) -> None:
        self.queue.append(event)
        if self.idle:
            self.wake.set()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything queued so far is sent or dropped (False: `timeout` passed)."""
        done = threading.Event()
        self.put(done)  # type: ignore[arg-type]
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            # Cleared and marked idle before looking: an append after the look sees idle
            # and sets the event, so no wake-up is lost.
            self.wake.clear()
            self.idle = True
            if not self.queue:
                self.wake.wait()
            self.idle = False
            batch, markers = self._drain()
            sent = self._publish(batch) if batch else True
            for marker in markers:
                marker.set()
            # Busy engines would keep this thread sending (and contending for the GIL with
            # the steps): resting after each batch lets a fast run's events coalesce and costs
            # a quiet page nothing (its event goes out at once). After a failure, rest longer.
            time.sleep(MIN_INTERVAL if sent else RETRY_INTERVAL)

    def _drain(self) -> tuple[dict[tuple[str, str], dict], list[threading.Event]]:
        batch: dict[tuple[str, str], dict] = {}
        markers: list[threading.Event] = []
        while self.queue:
            item = self.queue.popleft()
            if isinstance(item, threading.Event):
                markers.append(item)
                continue
            self.handled += 1
            try:
                message = None
                for group in groups_for(item):
                    key = (group, item.get("run_id", ""))
                    batch.pop(key, None)  # re-inserted last: the newest goes out last
                    batch[key] = message = message or message_for(item)
            except Exception as exc:  # noqa: BLE001 - a bad event must not stop the others
                logger.warning("live event not sent: %r (%s: %s)", item, type(exc).__name__, exc)
        return batch, markers

    def _publish(self, batch: dict[tuple[str, str], dict]) -> bool:
        commands = []
        for (group, _), message in batch.items():
            try:
                commands.append(("PUBLISH", self.target.channel(group), self.serialize(message)))
            except Exception as exc:  # noqa: BLE001 - a bad message must not stop the others
                logger.warning("live event not sent: %r (%s: %s)", message, type(exc).__name__, exc)
        try:
            try:
                self._send(commands)
            except redis.ConnectionError:  # e.g. Redis restarted since the last batch
                self.connection.disconnect()
                self._send(commands)  # once more, on a new connection
            return True
        except Exception as exc:  # noqa: BLE001 - pages catch up from the database
            logger.warning(
                "%d live messages not sent (%s: %s)", len(commands), type(exc).__name__, exc
            )
            with contextlib.suppress(Exception):
                self.connection.disconnect()  # unread replies or a dead socket: start afresh
            return False

    def _send(self, commands: list[tuple[str, str, bytes]]) -> None:
        """One round trip: every command written at once, then each reply read.

        redis-py's own connection, without the client's pipeline around it: per batch that
        wrapper (pool checkout with a readiness poll, retries, metrics hooks) cost as much
        CPU again as the send itself, and this thread's CPU is taken from the engine's GIL.
        """
        if commands:
            if getattr(self.connection, "_sock", None) is None:
                # connect() first: through Sentinel it is what asks for the current primary,
                # which sending on an unconnected socket would skip.
                self.connection.connect()
            self.connection.send_packed_command(self.connection.pack_commands(commands))
            for _ in commands:
                self.connection.read_response()


_senders: PerProcess[_Sender] = PerProcess(lambda: _Sender(target()))


def _sender() -> _Sender:
    return _senders.get()


def flush(timeout: float = 2.0) -> bool:
    """Send what is queued before the process exits (or a test looks)."""
    sender = _senders.made()
    return sender.flush(timeout) if sender is not None else True


atexit.register(flush)
