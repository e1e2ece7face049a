"""What the privacy page's "Connect your assistant" section shows: the person's own MCP
tokens (tenants/personal_tokens.py), the form to make one, and the client config to paste
(memory/privacy/views_assistant.py has the views)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from memory.forms import AssistantTokenForm
from memory.mcp import PATH as MCP_PATH
from tenants import personal_tokens
from tenants.models import ApiKey
from tenants.principal import Principal

SERVER_NAME = "agentstate-memory"
PLACEHOLDER = "<your token>"
SHOWN = 50  # the newest tokens listed (at most 20 are active)


@dataclass
class Section:
    """What the section shows: the person's tokens, the form, and the config to paste."""

    tokens: list[ApiKey]
    form: AssistantTokenForm
    mcp_url: str
    may_create: bool
    created: personal_tokens.CreatedToken | None = None
    error: str = ""
    config: str = field(init=False)
    command: str = field(init=False)

    def __post_init__(self) -> None:
        token = self.created.raw if self.created else PLACEHOLDER
        self.config = client_config(self.mcp_url, token)
        self.command = (
            f"claude mcp add --transport http {SERVER_NAME} {self.mcp_url}"
            f' --header "Authorization: Bearer {token}"'
        )


def mcp_url() -> str:
    return str(settings.AGENTSTATE_CONSOLE_URL).rstrip("/") + MCP_PATH


def client_config(url: str, token: str) -> str:
    """The `mcpServers` entry MCP clients read (Claude Code, Cursor, VS Code and others)."""
    entry = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    return json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2)


def section(principal: Principal, *, may_create: bool, **extra: Any) -> dict[str, Any]:
    """The section's context, for the privacy page and for the section alone. `may_create`:
    not a privacy link's session (a link valid for minutes must not mint a lasting token)."""
    tokens = personal_tokens.tokens_of(tenant=principal.tenant, user=principal.user)
    extra.setdefault("form", AssistantTokenForm())
    return {
        "assistant": Section(
            tokens=list(tokens.select_related(None)[:SHOWN]),
            mcp_url=mcp_url(),
            may_create=may_create,
            **extra,
        )
    }
