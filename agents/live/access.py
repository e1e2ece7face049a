"""Who a websocket belongs to and what they may watch, checked with every subscription.

A socket runs outside the HTTP middleware, so this does what `TenantMiddleware` does, with
the same functions (`own_memberships`, `member_principal`): read the session, pick the tenant
it chose (or the first membership), and build the principal, each read inside a transaction
with the row-level-security settings made for it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY

from tenants import scope
from tenants.middleware import SESSION_PRIVACY_ONLY_KEY, SESSION_TENANT_KEY
from tenants.models import Scope
from tenants.principal import Principal, member_principal
from tenants.selectors import own_memberships


class Refused(Exception):
    """The socket's user may not see this (another tenant's run, another member's run...)."""


def principal_for(user: Any, session_key: str | None) -> Principal | None:
    """The principal of a still-valid session, as `TenantMiddleware` would pick it; or None.

    The session is read again each time: logging out or switching tenant elsewhere counts.
    A privacy link's session gets None: `TenantMiddleware` treats it as logged out there too.
    """
    if user is None or not user.is_authenticated or not session_key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    if str(session.get(SESSION_KEY, "")) != str(user.pk) or not user.is_active:
        return None
    if session.get(SESSION_PRIVACY_ONLY_KEY) is not None:
        return None  # a privacy link's session watches nothing: it may open one page only
    with scope.transaction_scope():
        memberships = own_memberships(user)
    principal = member_principal(user, memberships, session.get(SESSION_TENANT_KEY))
    return principal if principal is not None and principal.can(Scope.READ) else None
