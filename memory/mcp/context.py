"""What every part of the MCP door shares without loading the MCP SDK (1.5-2.4 s to import,
done with the server: memory/mcp/app.py): where it is mounted, and one request's state."""

from __future__ import annotations

import contextvars
from typing import Any

PATH = "/mcp"

# Per HTTP request: what the token check met (an outage; why a token was refused), for
# McpApplication to answer.
request_state: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "mcp_request", default=None
)
