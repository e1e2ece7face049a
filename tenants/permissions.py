"""Role and scope checks for API views and web views."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.permissions import SAFE_METHODS, BasePermission

from tenants.models import Scope


class IsTenantMember(BasePermission):
    """Any principal of a tenant; `required_scope` on the view (or per method) narrows it.

    Reads need `read`; other methods need the view's `write_scope` (default `write`).
    """

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        principal = getattr(request._request, "principal", None)
        if principal is None:
            return False
        if request.method in SAFE_METHODS:
            scope = getattr(view, "read_scope", Scope.READ)
        else:
            scope = getattr(view, "write_scope", Scope.WRITE)
        return principal.can(scope)


def require_scope(scope: str) -> Callable:
    """Web views: login required, a tenant required, and `scope` in the member's role."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            principal = getattr(request, "principal", None)
            if principal is None:
                return render(request, "tenants/no_tenant.html", status=403)
            if not principal.can(scope):
                return render(request, "403.html", {"needed": Scope(scope).label}, status=403)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
