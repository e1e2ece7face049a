"""The live websocket (`/ws/live/`): one socket per page, any number of subscriptions.

The browser sends JSON; the server answers with HTML partials (see agents/live/render.py).

    {"type": "subscribe", "kind": "run", "run": "<uuid>", "after": 17}
    {"type": "subscribe", "kind": "runs", "filter": "status=running&agent=refund_desk"}
    {"type": "subscribe", "kind": "approvals", "filter": "status=pending"}   (filter optional)
    {"type": "unsubscribe", "kind": "run", "run": "<uuid>"}   (or "runs" / "approvals")

A socket without a logged-in session is closed with 4401, one whose user belongs to no
tenant (or lost the membership) with 4403. A subscription the user may not see (another
tenant's run, another member's) is refused: logged, nothing sent, the socket stays open.
Malformed messages (also NUL characters, lone surrogates or nesting deeper than
MAX_JSON_DEPTH, checked by core.json_input) are logged and ignored.

When the database or Redis is away, the socket is closed with 1013 (try again later), which
htmx's ws extension answers by reconnecting with backoff; static/js/live.js then subscribes
again with the number of the last event the page shows, and the server sends what it missed.
A socket that stays open through a Redis outage is caught up once the channel layer answers
again (agents.live.watch sends it `live.resync`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from agents.live import hub, render, watch
from agents.live.access import Refused, principal_for
from agents.live.broadcast import run_group, tenant_group
from agents.runtime.progress import LIVE_KINDS
from core import json_input, outage
from core.errors import BadInput
from core.text_input import check_query_string

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TRY_AGAIN_LATER = 1013  # the database or Redis is away; htmx's ws extension reconnects
MAX_MESSAGE_BYTES = 4096
MAX_SUBSCRIPTIONS = 32
KINDS = ("run", "runs")  # and every tenant feed registered with render.register_feed


class Malformed(ValueError):
    pass


class LiveConsumer(AsyncWebsocketConsumer):
    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except outage.OUTAGES as exc:
            # Only the channel layer's new_channel() gets here (dispatch() handles the rest):
            # with Redis away the socket has no channel. Closed with 1013, not a traceback
            # and a failed handshake: the page tries again later.
            if not outage.is_outage(exc) or hasattr(self, "channel_name"):
                raise
            logger.warning(
                "live socket refused for now (%s: %s): closed with %d",
                type(exc).__name__,
                exc,
                CLOSE_TRY_AGAIN_LATER,
            )
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER})

    async def connect(self) -> None:
        # Accept first so that the close code reaches the browser (a refused handshake is 1006).
        await self.accept()
        self.runs: dict[str, render.RunView] = {}
        self.feeds: dict[str, Any] = {}  # "runs" -> RunsView, "approvals" -> FeedView
        self.groups_joined: set[str] = set()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if await self._principal() is None:
            await self.close(code=CLOSE_FORBIDDEN)

    async def disconnect(self, code: int) -> None:
        watch.unfollow(self.channel_name)
        for group in getattr(self, "groups_joined", ()):
            with contextlib.suppress(*outage.OUTAGES):  # Redis away: its subscriptions are too
                await self.channel_layer.group_discard(group, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """A handler that found the database or Redis away closes the socket with 1013 (try
        again later): the browser reconnects with backoff and catches up, where an exception
        would log a traceback and close with 1011."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        try:
            # Not super().dispatch(): Channels runs close_old_connections() on the database
            # thread before every message, a thread hop per socket per event (one event to
            # 5,000 sockets cost 2.4 s of CPU). Every database call here goes through
            # database_sync_to_async, which closes old connections itself.
            await handler(message)
        except outage.OUTAGES as exc:
            if not outage.is_outage(exc):
                raise
            logger.warning(
                "live socket of user %s: %s (%s: %s); closing it with %d, the page reconnects",
                self._who(),
                message.get("type"),
                type(exc).__name__,
                exc,
                CLOSE_TRY_AGAIN_LATER,
            )
            if message.get("type") != "websocket.disconnect":
                await self.close(code=CLOSE_TRY_AGAIN_LATER)

    # --- from the browser -------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = _parse(text_data, bytes_data)
        except Malformed as exc:
            logger.warning(
                "live socket of user %s: ignored a malformed message: %s", self._who(), exc
            )
            return
        if message["type"] == "unsubscribe":
            await self._unsubscribe(message)
            return
        principal = await self._principal()  # the role and tenant, checked again each time
        if principal is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if len(self.runs) + len(self.feeds) >= MAX_SUBSCRIPTIONS:
            logger.warning("live socket of user %s: too many subscriptions", self._who())
            return
        subscribe = getattr(self, f"_subscribe_{message['kind']}", self._subscribe_feed)
        try:
            await subscribe(principal, message)
        except Refused as exc:
            logger.warning("live socket of user %s: subscription refused: %s", self._who(), exc)

    async def _subscribe_run(self, principal: Any, message: dict[str, Any]) -> None:
        run_id = message["run"]
        view = render.RunView(principal=principal, run_id=run_id, after=message["after"])
        group = run_group(run_id)
        await self._join(group)  # first, so that nothing committed from here on is missed
        try:
            sent = await database_sync_to_async(render.run_catch_up)(view)
        except Refused:
            if run_id not in self.runs:
                await self._leave(group)
            raise
        self.runs[run_id] = view
        await self._send_all(sent)

    async def _subscribe_runs(self, principal: Any, message: dict[str, Any]) -> None:
        view = render.RunsView(principal=principal, filter=message["filter"])
        await self._join(tenant_group(principal.tenant.pk))
        self.feeds["runs"] = view
        await self._send_all(await database_sync_to_async(render.runs_snapshot)(view))

    async def _subscribe_feed(self, principal: Any, message: dict[str, Any]) -> None:
        """A tenant feed an app registered (approvals, the console's, ...)."""
        kind = message["kind"]
        await self._join(tenant_group(principal.tenant.pk))
        view = render.FeedView(principal=principal, page=message.get("filter"))
        self.feeds[kind] = view
        feed = database_sync_to_async(render.feed_messages)
        await self._send_all(await feed(kind, view, None))

    async def _unsubscribe(self, message: dict[str, Any]) -> None:
        if message["kind"] == "run":
            if self.runs.pop(message["run"], None) is not None:
                await self._leave(run_group(message["run"]))
        else:
            self.feeds.pop(message["kind"], None)

    # --- from the channel layer (agents.live.broadcast) -------------------------------------------

    async def live_event(self, event: dict[str, Any]) -> None:
        """An event committed (or a live one) somewhere: update what this socket shows."""
        run_id = event.get("run_id") or ""
        view = self.runs.get(run_id)
        if view is not None:
            await self._run_event(view, event)
        if event.get("kind") in LIVE_KINDS:
            return
        for kind, feed in list(self.feeds.items()):
            if str(_tenant_of(feed)) != str(event.get("tenant_id")):
                continue
            if kind == "runs":
                await self._send_all(
                    render.runs_messages(feed, await _runs_event(feed, event), event)
                )
            else:  # the feed answers [] for what its page does not show
                render_feed = database_sync_to_async(render.feed_messages)
                await self._send_all(await render_feed(kind, feed, event))

    async def _run_event(self, view: render.RunView, event: dict[str, Any]) -> None:
        if event.get("kind") in LIVE_KINDS:
            after = event.get("after") or 0
            if after > view.after:  # the page lacks the event that started this step
                await self._catch_up(view)
            if after == view.after:
                await self._send_all(render.run_activity(view, event))
            return
        seq = event.get("seq")
        if seq is not None and seq <= view.after:
            return  # already shown (read from the database by an earlier catch-up)
        await self._catch_up(view, upto=seq)

    async def _catch_up(self, view: render.RunView, upto: int | None = None) -> None:
        """Bring the page up to the present, through at least event `upto`. Every socket of
        this process on the run that shows the same event and sees as this one does gets the
        one update read and rendered for all of them (agents/live/hub.py)."""
        principal, after = view.principal, view.after
        key = ("run", view.run_id, after, hub.viewer_class(principal))

        def read() -> Any:
            return database_sync_to_async(render.run_update)(principal, view.run_id, after)

        try:
            update = await hub.work.shared(key, read, keep=False)
            if upto is not None and update.upto < upto:
                # Another socket's read, begun before that event committed: read again for
                # this one.
                update = await database_sync_to_async(render.run_update)(
                    principal, view.run_id, after
                )
            if update.packed:
                sent = await database_sync_to_async(render.run_messages)(view, update)
            else:
                sent = render.run_messages(view, update)
        except Refused as exc:  # e.g. the run was moved out of sight: stop following it
            logger.warning("live socket of user %s: %s", self._who(), exc)
            self.runs.pop(view.run_id, None)
            await self._leave(run_group(view.run_id))
            return
        await self._send_all(sent)

    async def live_resync(self, event: dict[str, Any]) -> None:
        """The channel layer lost Redis for a while (agents.live.watch): the events of that
        time were dropped, so bring everything this socket shows up to date."""
        for view in list(self.runs.values()):
            await self._catch_up(view)
        for kind, feed in list(self.feeds.items()):
            if kind == "runs":
                await self._send_all(await database_sync_to_async(render.runs_snapshot)(feed))
            else:
                render_feed = database_sync_to_async(render.feed_messages)
                await self._send_all(await render_feed(kind, feed, None))

    # --- helpers ----------------------------------------------------------------------------------

    async def _principal(self) -> Any:
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        return await database_sync_to_async(principal_for)(self.scope.get("user"), key)

    async def _join(self, group: str) -> None:
        if group not in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.add(group)
            watch.follow(self.channel_name)

    async def _leave(self, group: str) -> None:
        if group in self.groups_joined and not group.startswith("tenant."):
            await self.channel_layer.group_discard(group, self.channel_name)
            self.groups_joined.discard(group)

    async def _send_all(self, messages: list[str]) -> None:
        for text in messages:
            await self.send(text_data=text)

    def _who(self) -> str:
        return str(getattr(self.scope.get("user"), "pk", None) or "anonymous")


async def _runs_event(feed: render.RunsView, event: dict[str, Any]) -> render.RunsEvent:
    """What the event changes in runs lists as this socket's viewer class sees them: read and
    rendered once for all the process's sockets of that class (agents/live/hub.py)."""
    principal = feed.principal
    key = (
        "runs",
        hub.viewer_class(principal),
        event.get("run_id"),
        event.get("kind"),
        event.get("seq"),
        event.get("status"),
    )
    return await hub.work.shared(
        key, lambda: database_sync_to_async(render.runs_event)(principal, event)
    )


def _tenant_of(feed: Any) -> Any:
    principal = getattr(feed, "principal", feed)
    return principal.tenant.pk


def _parse(text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
    """A valid subscribe or unsubscribe message, normalised; else Malformed."""
    if text_data is None:
        raise Malformed("binary frame")
    if len(text_data) > MAX_MESSAGE_BYTES:
        raise Malformed(f"{len(text_data)} characters")
    try:
        message = json_input.loads(text_data)
    except BadInput as exc:  # also NUL characters, lone surrogates and deep nesting
        raise Malformed(f"{exc.code}: {exc.message}") from None
    if not isinstance(message, dict):
        raise Malformed("not a JSON object")
    kind = message.get("kind")
    known = kind in KINDS or (isinstance(kind, str) and kind in render.FEEDS)
    if message.get("type") not in ("subscribe", "unsubscribe") or not known:
        raise Malformed(f"type {message.get('type')!r}, kind {kind!r}")
    parsed: dict[str, Any] = {"type": message["type"], "kind": kind}
    if kind == "run":
        try:
            parsed["run"] = str(uuid.UUID(str(message.get("run"))))
        except ValueError:
            raise Malformed("run is not a uuid") from None
        after = message.get("after", 0)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise Malformed("after is not a number of an event")
        parsed["after"] = after
    elif kind == "runs" or "filter" in message:  # optional for the tenant feeds
        query = message.get("filter", "")
        if not isinstance(query, str) or len(query) > 500:
            raise Malformed("filter is not a query string")
        try:
            check_query_string(query)
        except BadInput as exc:
            raise Malformed(f"filter: {exc.message}") from None
        parsed["filter"] = query
    return parsed
