"""Rate budgets are fixed windows (tenants/throttling.py): a test that fills one starts clear of
its end, or the calls after the edge land in a fresh window and are let through. A CI run at
hh:mm:59.95 got 200 where the sixth read of a 5/min budget must get 429, and another at
hh:16:59.99 let a second MCP call of a 1/min budget through at hh:17:00.05."""

from __future__ import annotations

import time


def clear_of_a_window_edge(window: int = 60, margin: float = 5.0) -> None:
    """Wait, if need be, until at least `margin` seconds of the current window are left."""
    left = window - time.time() % window
    if left < margin:
        time.sleep(left + 0.05)
