"""Fault injection for the durability tests: kill this worker at a named point, once.

Armed only when AGENTSTATE_FAILPOINT_DIR is set and a file named after the point exists in
it; triggering removes the file first, so the worker that takes over passes the point.
An empty file kills the process; a file reading `sleep:<seconds>` holds it there instead
(the outage tests stop a server while a worker waits at the point).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_DIR = os.environ.get("AGENTSTATE_FAILPOINT_DIR")


def failpoint(name: str, qualifier: str = "") -> None:
    """Kill the process (or sleep) if `name` (or `name.qualifier`, e.g. a step) is armed."""
    if not _DIR:
        return
    for armed in (name, f"{name}.{qualifier}" if qualifier else None):
        if armed is None:
            continue
        path = Path(_DIR) / armed
        try:
            action = path.read_text().strip()
            path.unlink()
        except FileNotFoundError:
            continue
        if action.startswith("sleep:"):
            time.sleep(float(action.removeprefix("sleep:")))
            continue
        os.kill(os.getpid(), signal.SIGKILL)
