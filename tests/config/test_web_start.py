"""What a web process loads as it starts (config/asgi.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import processes

LOADED = "import sys, config.asgi; print('memory.mcp.server' in sys.modules, 'mcp' in sys.modules)"


@pytest.mark.parametrize(
    ("preload", "loaded"), [("1", ["True", "True"]), ("0", ["False", "False"])]
)
def test_a_web_process_imports_the_mcp_server_as_it_starts_unless_told_to_wait_for_the_first_call(
    preload, loaded
):
    env = processes.process_env(WEB_PRELOAD_MCP=preload)
    answer = subprocess.run(
        [sys.executable, "-c", LOADED],
        env=env,
        cwd=processes.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert answer.stdout.split()[-2:] == loaded, answer.stderr[-3000:]
