"""Who calls the MCP server: the bearer token checked before the SDK serves a request (None
answers 401, and why is kept for McpApplication), and the principal each call acts as."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections
from mcp.server.auth.provider import AccessToken

from core import outage
from memory.mcp.context import request_state
from tenants import personal_tokens
from tenants.api_auth import KeyRefused, api_key_resolve
from tenants.principal import Principal
from tenants.scope import transaction_scope


class TokenVerifier:
    """The SDK's bearer check, done with the REST API's keys and people's own MCP tokens:
    None answers 401 (why, McpApplication tells the caller)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        state = request_state.get()
        try:
            access, reason = await in_thread(_verify, token)
        except Exception as exc:
            if not outage.is_outage(exc):
                raise
            # The SDK can only answer 401 here: McpApplication turns it into a 503.
            if state is not None:
                state["outage"] = exc
            return None
        if access is None and state is not None:
            state["refused"] = reason
        return access


def _verify(token: str) -> tuple[AccessToken | None, str]:
    try:
        with transaction_scope():
            principal = principal_for(token)
    except KeyRefused as exc:
        return None, str(exc)
    key = principal.api_key
    assert key is not None
    claims = {"tenant": str(key.tenant_id)}
    if principal.personal_token:
        claims["person"] = str(key.user_id)
    access = AccessToken(
        token=token,
        client_id=str(key.pk),
        scopes=list(key.scopes),
        expires_at=int(key.expires_at.timestamp()) if key.expires_at else None,
        claims=claims,
    )
    return access, ""


def principal_for(token: str) -> Principal:
    """Whom a bearer token acts as: a person (their own token) or an integration (a key)."""
    if personal_tokens.is_personal(token):
        try:
            return personal_tokens.token_resolve(token)
        except personal_tokens.TokenRefused as exc:
            raise KeyRefused(str(exc)) from None
    key = api_key_resolve(token)
    return Principal.for_api_key(key, key.tenant)


async def in_thread(fn: Callable, *args: Any) -> Any:
    """Run sync ORM work in a thread of this call's own (as Django runs a request), then hand
    its connection back (to the pool, in a web process)."""

    def run() -> Any:
        try:
            return fn(*args)
        finally:
            connections.close_all()

    async with ThreadSensitiveContext():
        return await sync_to_async(run, thread_sensitive=True)()
