"""Request-wide middleware: one transaction per request with the tenant context set."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from tenants import context
from tenants.principal import Principal
from tenants.selectors import memberships_for_user

SESSION_TENANT_KEY = "tenant_id"


class TenantMiddleware:
    """Opens the request's transaction, picks the tenant, sets row-level security for it.

    Every request is one transaction: an exception anywhere rolls back everything it wrote.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with context.transaction_scope():
            request.principal = None  # type: ignore[attr-defined]
            request.memberships = []  # type: ignore[attr-defined]
            user = request.user
            if user.is_authenticated:
                self._resolve_tenant(request, user)
            return self.get_response(request)

    @staticmethod
    def _resolve_tenant(request: HttpRequest, user) -> None:
        # Memberships are readable by their own user before any tenant is chosen.
        context.activate(tenant_id=None, user_id=user.pk)
        memberships = memberships_for_user(user)
        request.memberships = memberships  # type: ignore[attr-defined]
        if not memberships:
            return
        wanted = request.session.get(SESSION_TENANT_KEY)
        chosen = next((m for m in memberships if str(m.tenant_id) == wanted), memberships[0])
        context.activate(tenant_id=chosen.tenant_id, user_id=user.pk)
        request.principal = Principal.for_member(  # type: ignore[attr-defined]
            tenant=chosen.tenant, user=user, role=chosen.role
        )


class ContentSecurityPolicyMiddleware:
    """No inline script anywhere: scripts and styles come from our own static files."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        return response
