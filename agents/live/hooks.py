"""What live progress subscribes to: every progress event is broadcast to the pages watching
it; approvals' pages (inbox, badge, request), the admin console and the chat get their live
feeds."""

from __future__ import annotations

from agents.console.live import console_feed, recovered_feed
from agents.live.broadcast import broadcast
from agents.live.render import chat_feed, register_feed
from agents.runtime import progress
from approvals.live import approvals_feed


def register() -> None:
    progress.subscribe(broadcast)
    register_feed("approvals", approvals_feed)  # the inbox, its badge, a request's page
    register_feed("console", console_feed)  # the runs console's rows and counts
    register_feed("console_recovered", recovered_feed)  # its recovered history
    register_feed("chat", chat_feed)  # a conversation's reply: progress words, answer, facts
