"""Fault injection for the durability tests: kill this worker at a named point, once.

Armed only when AGENTSTATE_FAILPOINT_DIR is set and a file named after the point exists in
it; triggering removes the file first, so the worker that takes over passes the point.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

_DIR = os.environ.get("AGENTSTATE_FAILPOINT_DIR")


def failpoint(name: str, qualifier: str = "") -> None:
    """Kill the process if `name` (or `name.qualifier`, e.g. a step name) is armed."""
    if not _DIR:
        return
    for armed in (name, f"{name}.{qualifier}" if qualifier else None):
        if armed is None:
            continue
        try:
            (Path(_DIR) / armed).unlink()
        except FileNotFoundError:
            continue
        os.kill(os.getpid(), signal.SIGKILL)
