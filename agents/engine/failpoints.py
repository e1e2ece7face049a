"""Fault injection for the durability tests: kill this worker at a named point, once.

Armed only when AGENTSTATE_FAILPOINT_DIR is set and a file named after the point exists in
it; triggering removes the file first, so the worker that takes over passes the point.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

_DIR = os.environ.get("AGENTSTATE_FAILPOINT_DIR")


def failpoint(name: str) -> None:
    if not _DIR:
        return
    marker = Path(_DIR) / name
    try:
        marker.unlink()
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)
