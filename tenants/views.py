"""Console pages of the tenants app: home, tenant switcher, API keys, audit log.

The members page is views_members.py; invitation links and password reset views_auth.py."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import AppError
from tenants import selectors, services
from tenants.forms import ApiKeyForm, AuditFilterForm, TenantSwitchForm
from tenants.middleware import SESSION_TENANT_KEY
from tenants.models import Scope
from tenants.permissions import require_scope

CONFIRM = "tenants/confirm.html"


@require_GET
@require_scope(Scope.READ)
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "tenants/home.html", {"sections": _sections(request)})


def _sections(request: HttpRequest) -> list[dict]:
    principal = request.principal
    sections = [
        {"name": "Runs", "url": "agents:runs", "text": "Follow agent runs step by step."},
        {
            "name": "Conversations",
            "url": "agents:conversations",
            "text": "Threads with agents, their forks and summaries.",
        },
        {
            "name": "Approvals",
            "url": "approvals:approvals",
            "text": "Approve or reject paused runs.",
        },
        {"name": "My memory", "url": "memory:my_memory", "text": "What agents remember about you."},
    ]
    if principal.can(Scope.ADMIN):
        sections.append(
            {
                "name": "Console",
                "url": "console:console_runs",
                "text": "Find, explain and repair stuck runs.",
            }
        )
        sections.append(
            {"name": "Admin", "url": "tenants:admin_home", "text": "Members, API keys, audit log."}
        )
    return sections


@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("tenants:login")
    form = TenantSwitchForm(request.POST)
    if not form.is_valid():
        raise Http404
    wanted = str(form.cleaned_data["tenant"])
    if not any(str(m.tenant_id) == wanted for m in request.memberships):
        raise Http404  # never reveal whether another tenant exists
    request.session[SESSION_TENANT_KEY] = wanted
    return redirect("tenants:home")


@require_GET
@require_scope(Scope.ADMIN)
def admin_home(request: HttpRequest) -> HttpResponse:
    return redirect("tenants:members")


@require_http_methods(["GET", "POST"])
@require_scope(Scope.ADMIN)
def api_keys(request: HttpRequest) -> HttpResponse:
    principal = request.principal
    created = None
    form = ApiKeyForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            created = services.api_key_create(actor=principal, **form.cleaned_data)
            form = ApiKeyForm()
        else:
            status = 400
    context = {
        "form": form,
        "created": created,
        "keys": selectors.api_keys_for_tenant(tenant=principal.tenant),
    }
    template = "tenants/api_keys.html"
    if request.htmx:
        template += "#keys-panel"
    return render(request, template, context, status=status)


@require_http_methods(["GET", "POST"])
@require_scope(Scope.ADMIN)
def api_key_revoke(request: HttpRequest, key_id) -> HttpResponse:
    """GET: the confirmation (the key's row, with htmx; else a page), or with ?keep the row
    as it was. POST: revoke. The same way to ask as the members page (views_members.py)."""
    principal = request.principal
    key = get_object_or_404(selectors.api_keys_for_tenant(tenant=principal.tenant), pk=key_id)
    keep = "keep" in request.GET
    if request.method == "GET":
        if not request.htmx:
            return redirect("tenants:api_keys") if keep else render(request, CONFIRM, {"key": key})
        context = {"key": key, "confirm": not keep, "focus": keep}
        return render(request, "tenants/api_keys.html#key-row", context)
    error = None
    try:
        services.api_key_revoke(actor=principal, key=key)
    except AppError as exc:
        error = exc.message
    if not request.htmx:
        if error:
            messages.error(request, error)
        else:
            messages.success(request, f"{key.name} was revoked.")
        return redirect("tenants:api_keys")
    return render(
        request,
        "tenants/api_keys.html#key-row",
        {"key": key, "error": error},
        status=409 if error else 200,
    )


@require_GET
@require_scope(Scope.ADMIN)
def audit_log(request: HttpRequest) -> HttpResponse:
    """The tenant's audit events, newest first; a bad position is said (400), not applied."""
    filters = AuditFilterForm(request.GET)
    valid = filters.is_valid()
    events = selectors.audit_events_for_tenant(
        tenant=request.principal.tenant,
        before_id=filters.cleaned_data["before"] if valid else None,
        limit=50,
    )
    older = events[-1].id if len(events) == 50 else None
    context = {"events": events, "older": older, "filters": filters}
    return render(request, "tenants/audit.html", context, status=200 if valid else 400)
