"""ASGI entry point: HTTP through Django (and /mcp through the MCP server), websockets
through Channels."""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A web process shares a bounded pool of connections among its request threads (settings).
os.environ.setdefault("AGENTSTATE_DB_POOL", "1")
os.environ.setdefault("DB_APPLICATION_NAME", "agentstate-web")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from agents.web import langgraph_reads, langgraph_steps  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from memory import mcp  # noqa: E402
from memory.search import query_vectors  # noqa: E402

query_vectors.prepare_web_process()
if settings.WEB_PRELOAD_MCP:  # else at the first MCP request (memory/mcp/app.py)
    from memory.mcp import server as _mcp_server  # noqa: E402, F401

if settings.WEB_THREADS:  # Django's HTTP on a fixed pool of threads (config/http.py)
    from config import http  # noqa: E402

    django_http_app: Any = http.application(settings.WEB_THREADS)
else:
    django_http_app = django_asgi_app


async def http_app(scope, receive, send) -> None:
    """The MCP server (memory/mcp/) at /mcp, the LangGraph saver's per-step door and its
    one-checkpoint read (agents/web/langgraph_steps.py, langgraph_reads.py, served lean);
    every other path goes to Django."""
    path = scope["path"]
    if path == langgraph_steps.PATH:
        await langgraph_steps.application(scope, receive, send)
    elif path == langgraph_reads.PATH and (query := langgraph_reads.lean_query(scope)):
        await langgraph_reads.application(scope, receive, send, query)
    elif path == mcp.PATH or path.startswith(mcp.PATH + "/"):
        await mcp.application(scope, receive, send)
    else:
        await django_http_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        # A page of another site must not open a socket with our cookies: the Origin must be
        # one of ours (settings.WEBSOCKET_ALLOWED_ORIGINS, never a wildcard).
        "websocket": OriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
            settings.WEBSOCKET_ALLOWED_ORIGINS,
        ),
    }
)
