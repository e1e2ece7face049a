"""The MCP server of the memory app: four memory tools over streamable HTTP at /mcp,
authenticated by API key (server.py: the tools; app.py: the ASGI app)."""

from memory.mcp.app import application
from memory.mcp.server import PATH

__all__ = ["PATH", "application"]
