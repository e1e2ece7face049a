"""The MCP server of the memory app: five memory tools over streamable HTTP at /mcp, for an
integration's API key or a person's own MCP token (server.py: the tools; auth.py: the tokens;
answers.py: results and refusals; app.py: the ASGI app; context.py: what they share).
Importing the package does not load the MCP SDK: the server does, when first built."""

from memory.mcp.app import application
from memory.mcp.context import PATH

__all__ = ["PATH", "application"]
