"""What live progress subscribes to: every progress event is broadcast to the pages watching
it, and approvals' pages (inbox, badge, request) get their live feed."""

from __future__ import annotations

from agents.live.broadcast import broadcast
from agents.live.render import register_feed
from agents.runtime import progress
from approvals.live import approvals_feed


def register() -> None:
    progress.subscribe(broadcast)
    register_feed("approvals", approvals_feed)  # the inbox, its badge, a request's page
