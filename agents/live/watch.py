"""Catch open sockets up after the channel layer's Redis comes back.

While Redis is away, the engine's live messages are dropped (agents.live.broadcast) and this
process's pub/sub subscriptions are gone; the layer subscribes again once Redis answers, but
a socket that stayed open would show what it showed before the outage until its run's next
event, forever if the run finished meanwhile. So, while any socket of this process follows
something, one task per event loop sends a ping through the layer to a channel of its own
every PING_INTERVAL seconds. When a ping that failed (Redis refused it, or it never came
back: the subscriptions were not restored yet) is followed by one that makes the round trip,
the subscriptions are back, and every socket here is told to catch up from the database
(a `live.resync` message through the layer, handled in order with its other messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from typing import Any

from channels.layers import get_channel_layer

from core import outage

logger = logging.getLogger(__name__)

PING_INTERVAL = 1.0  # seconds between pings
PING_TIMEOUT = 2.0  # a ping not back by then counts as lost
RESYNC = {"type": "live.resync"}  # handled by LiveConsumer.live_resync
OUTAGES = (*outage.OUTAGES, OSError)


class _Watch:
    """The sockets of one event loop that follow something, and the task pinging for them."""

    def __init__(self) -> None:
        self.channels: set[str] = set()
        self.task: asyncio.Task | None = None


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def follow(channel_name: str) -> None:
    """The socket on `channel_name` follows something: keep it caught up after an outage."""
    loop = asyncio.get_running_loop()
    watch = _watches.setdefault(loop, _Watch())
    watch.channels.add(channel_name)
    if watch.task is None or watch.task.done():
        watch.task = loop.create_task(_run(watch), name="live-watch")


def unfollow(channel_name: str) -> None:
    """The socket closed; the last one of the loop stops the pings."""
    try:
        watch = _watches.get(asyncio.get_running_loop())
    except RuntimeError:  # no running loop: nothing was followed from here
        return
    if watch is None:
        return
    watch.channels.discard(channel_name)
    if not watch.channels and watch.task is not None:
        watch.task.cancel()
        watch.task = None


async def _run(watch: _Watch) -> None:
    layer = get_channel_layer()
    # The pings go to a group of one: group_add subscribes again when an earlier attempt
    # failed, where a channel whose first SUBSCRIBE failed would stay unsubscribed.
    name = f"live-watch.{uuid.uuid4().hex}"
    channel, group = f"specific.{name}", name
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    receiver = asyncio.create_task(_receive(layer, channel, answers))
    healthy, number = True, 0
    try:
        while True:
            await asyncio.sleep(PING_INTERVAL)
            number += 1
            ok = await _ping(layer, channel, group, number, answers)
            if ok and not healthy:
                logger.warning(
                    "live: the channel layer answers again; %d sockets catch up",
                    len(watch.channels),
                )
                for socket in list(watch.channels):
                    await _quietly(layer.send(socket, RESYNC))
            elif healthy and not ok:
                logger.warning("live: the channel layer does not answer; sockets catch up later")
            healthy = ok
    finally:
        receiver.cancel()  # the layer unsubscribes the channel when its receive is cancelled
        with contextlib.suppress(*OUTAGES):
            await layer.group_discard(group, channel)


async def _receive(layer: Any, channel: str, answers: asyncio.Queue) -> None:
    """Hand every message of `channel` to the pinger (never cancelled between pings: a
    cancelled receive makes the layer drop the channel)."""
    while True:
        try:
            answers.put_nowait(await layer.receive(channel))
        except OUTAGES:
            await asyncio.sleep(PING_INTERVAL)  # its own SUBSCRIBE failed: the group's will do


async def _ping(layer: Any, channel: str, group: str, number: int, answers: asyncio.Queue) -> bool:
    """Whether a message sent now comes back through this process's subscriptions."""
    try:
        await layer.group_add(group, channel)  # a no-op once subscribed
        await layer.group_send(group, {"type": "live.ping", "n": number})
        async with asyncio.timeout(PING_TIMEOUT):
            while (await answers.get()).get("n") != number:
                pass  # a late answer to an earlier ping
    except (TimeoutError, *OUTAGES):
        return False
    return True


async def _quietly(sending: Any) -> None:
    with contextlib.suppress(*OUTAGES):
        await sending
