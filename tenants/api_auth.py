"""API authentication: Bearer API keys, and the browser session for the console's own calls."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from tenants import rows, scope
from tenants.models import ApiKey, Tenant
from tenants.personal_tokens import is_personal
from tenants.principal import Principal
from tenants.services import api_key_hash, api_key_touch, parse_api_key


class ApiKeyUser:
    """Stands in for `request.user` when an integration calls with an API key."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.username = principal.label

    def __str__(self) -> str:
        return self.username


# A person's own token reaches their memories through the MCP server, and nothing else.
PERSONAL_ELSEWHERE = (
    "This is a personal MCP token: it works only with the MCP server at /mcp, not here."
)


class KeyRefused(Exception):
    """Why a bearer token does not authenticate, in words safe to tell the caller."""


def api_key_resolve(token: str, *, along: Callable[[uuid.UUID, str], None] | None = None) -> ApiKey:
    """The active, unexpired key that `token` is (its last use recorded), or KeyRefused.

    The key names its tenant, so the lookup runs under that tenant's row-level security,
    activated for the rest of the current transaction. The REST API and the MCP server
    (memory/mcp/) both authenticate integrations' keys through here; a person's own MCP token
    is refused here (tenants/personal_tokens.py resolves it, for the MCP server only).

    `along(tenant_id, key_hash)` queues statements of the caller's between the tenant's
    activation and the key's lookup: in a pipeline, they travel in the same round trip (their
    SQL must check the key itself, since it runs before the key is known to be good).
    """
    if is_personal(token):
        raise KeyRefused(PERSONAL_ELSEWHERE)
    parsed = parse_api_key(token)
    if parsed is None:
        raise KeyRefused("The API key is malformed.")
    tenant_hex, raw = parsed
    tenant_id = uuid.UUID(tenant_hex)
    scope.activate(tenant_id=tenant_id)
    key_hash = api_key_hash(raw)
    if along is not None:
        along(tenant_id, key_hash)
    key = _key(tenant_id, key_hash)
    if key is not None and key.user_id is not None:  # a person's token, whatever its prefix
        raise KeyRefused(PERSONAL_ELSEWHERE)
    if key is None or not key.is_active:
        raise KeyRefused("The API key is unknown or revoked.")
    if key.is_expired:
        raise KeyRefused("The API key has expired.")
    api_key_touch(key=key)
    return key


# Every API call runs this lookup: written by hand (tenants/rows.py), it costs a fraction of the
# CPU of the same query compiled by the ORM.
_KEY_SQL = (
    f"SELECT {rows.columns(ApiKey, 'k')}, {rows.columns(Tenant, 't')}"
    " FROM tenants_apikey k JOIN tenants_tenant t ON t.id = k.tenant_id"
    " WHERE k.tenant_id = %s AND k.key_hash = %s"
)


def _drop_if_dead() -> None:
    """Django's once-per-request health check, which its cursors make and this hand-written
    lookup would skip: a connection that died with a PostgreSQL restart is replaced here, not
    answered as an outage. Not inside a pipeline (the steps door checks its own threads')."""
    raw = connection.connection
    if raw is not None and raw.info.pipeline_status == psycopg.pq.PipelineStatus.OFF:
        connection.close_if_health_check_failed()


def _key(tenant_id: uuid.UUID, key_hash: str) -> ApiKey | None:
    """The key of this tenant with this hash, its tenant loaded with it (as
    `ApiKey.objects.for_tenant(tenant_id).select_related("tenant").filter(key_hash=...)`)."""
    _drop_if_dead()
    if settings.AGENTSTATE_PREPARED_STATEMENTS:
        # Prepared (planned once per connection), as the engine's statements are.
        connection.ensure_connection()
        with connection.wrap_database_errors:
            cursor = psycopg.Cursor(connection.connection)
            cursor.execute(_KEY_SQL, [tenant_id, key_hash], prepare=True)
            row = cursor.fetchone()
    else:
        with connection.cursor() as cursor:
            cursor.execute(_KEY_SQL, [tenant_id, key_hash])
            row = cursor.fetchone()
    if row is None:
        return None
    n = rows.width(ApiKey)
    key = rows.instance(ApiKey, row[:n])
    key.tenant = rows.instance(Tenant, row[n:])
    return key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer ak_<tenant>_<secret>`.

    The key names its tenant, so the lookup itself runs under that tenant's row-level
    security: no cross-tenant read is needed to authenticate.
    """

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise exceptions.AuthenticationFailed("Use `Authorization: Bearer <api key>`.")
        try:
            key = api_key_resolve(token.strip())
        except KeyRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        principal = Principal.for_api_key(key, key.tenant)
        request._request.principal = principal
        return ApiKeyUser(principal), key

    def authenticate_header(self, request) -> str:
        # Present so that DRF answers 401 (not 403) to unauthenticated calls.
        return 'Bearer realm="api"'


class TenantSessionAuthentication(authentication.SessionAuthentication):
    """The console's session (with CSRF), valid only for a member of some tenant."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None or getattr(request._request, "principal", None) is None:
            return None
        return result


# How the two schemes appear in the OpenAPI schema.
class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api_auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "ak_<tenant>_<secret>"}


class ConsoleSessionScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api_auth.TenantSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}
