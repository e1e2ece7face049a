"""Request-wide middleware: one transaction per request with the tenant context set."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import user_logged_in
from django.contrib.auth.models import AnonymousUser
from django.db import connection, transaction
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from core import outage
from tenants import scope
from tenants.models import Role
from tenants.principal import member_principal
from tenants.selectors import own_memberships

SESSION_TENANT_KEY = "tenant_id"
# A session opened by a one-time privacy link (memory.privacy.views.privacy_link) holds its
# tenant id here. It reaches only these views (URL names); anywhere else it is logged out, the API
# included, and so is its live socket (agents/live/access.py). A password login ends it.
SESSION_PRIVACY_ONLY_KEY = "privacy_only_tenant_id"
PRIVACY_ONLY_VIEWS = frozenset(
    {
        "memory:my_memory",
        "memory:memory_export",
        "memory:memory_delete_all",
        "memory:memory_fact_edit",
        "memory:memory_fact_delete",
        "tenants:logout",
    }
)


def _privacy_only_elsewhere(request: HttpRequest) -> bool:
    """A privacy link's session, asking for anything but the privacy page."""
    if request.session.get(SESSION_PRIVACY_ONLY_KEY) is None:
        return False
    try:
        match = resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return True
    # The view name carries the namespace: "admin:logout" is not "logout".
    return match.view_name not in PRIVACY_ONLY_VIEWS


async def _anonymous() -> AnonymousUser:
    return AnonymousUser()


@receiver(user_logged_in, dispatch_uid="tenants.privacy_only_ends_at_login")
def _privacy_only_ends_at_login(sender, request, user, **kwargs) -> None:
    # login() keeps the session's data when the same person logs in again: a password login
    # must not inherit the link's restriction. (The link's own login sets it afterwards.)
    session = getattr(request, "session", None)
    if session is not None:
        session.pop(SESSION_PRIVACY_ONLY_KEY, None)


class _Done:
    """What a request's transaction came to: the response, and whether it has committed."""

    def __init__(self) -> None:
        self.response: HttpResponse | None = None
        self.committed = False

    def commit(self) -> None:
        self.committed = True


class TenantMiddleware:
    """Opens the request's transaction, picks the tenant, sets row-level security for it.

    Every request is one transaction: an exception anywhere rolls back everything it wrote.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        done = _Done()
        try:
            with scope.transaction_scope():
                # The first of the transaction's commit hooks: once it has run, what the
                # request wrote is durable, whatever the hooks after it do.
                transaction.on_commit(done.commit)
                done.response = self._in_transaction(request)
            return done.response
        except outage.OUTAGES as exc:  # the transaction could not begin or commit
            if not outage.is_outage(exc):
                raise
            if done.committed and done.response is not None:
                # A hook after the commit (a queue message: Redis is away) failed. The work is
                # done and durable, and the sweeps send what the queue missed (a queued run
                # is sent again by the recovery sweep): a 503 would have the client do it twice.
                outage.log_after_commit(request, exc)
                return done.response
            return outage.unavailable_response(request, exc)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        """A view that lost the database (or broker) answers 503; the transaction rolls back."""
        if not outage.is_outage(exc):
            return None
        if connection.in_atomic_block:
            transaction.set_rollback(True)
        return outage.unavailable_response(request, exc)

    def _in_transaction(self, request: HttpRequest) -> HttpResponse:
        request.principal = None  # type: ignore[attr-defined]
        request.memberships = []  # type: ignore[attr-defined]
        user = request.user
        if user.is_authenticated and _privacy_only_elsewhere(request):
            user = request.user = AnonymousUser()
            request.auser = _anonymous  # type: ignore[attr-defined]
        if user.is_authenticated:
            self._resolve_tenant(request, user)
        return self.get_response(request)

    @staticmethod
    def _resolve_tenant(request: HttpRequest, user) -> None:
        memberships = own_memberships(user)
        privacy_only = request.session.get(SESSION_PRIVACY_ONLY_KEY)
        if privacy_only is not None:  # that tenant's end user, or nobody
            memberships = [
                m for m in memberships if str(m.tenant_id) == privacy_only and m.role == Role.MEMBER
            ]
        request.memberships = memberships  # type: ignore[attr-defined]
        principal = member_principal(user, memberships, request.session.get(SESSION_TENANT_KEY))
        if principal is None:
            return
        scope.activate(tenant_id=principal.tenant.pk, user_id=user.pk)
        request.principal = principal  # type: ignore[attr-defined]
