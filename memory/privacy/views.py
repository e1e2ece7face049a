"""The privacy page: what the agents remember about me, with edit, delete, delete all, export;
the memory settings of a tenant (admins); and the one-time privacy link of the API, whose
session reaches these privacy pages only (see tenants/middleware.py).

Everyone with a membership has a privacy page about themselves, whatever their role. Managers
and admins see a member's page only while the tenant grants support access, and each such
view is audited; it is read-only.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.confirm import confirmation_response
from core.errors import AppError
from core.htmx import is_partial, vary_on_htmx
from memory import category_rules, selectors
from memory.facts import services
from memory.forms import (
    DeleteAllForm,
    FactEditForm,
    MemoryFilterForm,
    PolicyForm,
    SupportAccessForm,
)
from memory.models import MemoryPolicy
from memory.privacy import assistant, links, pages
from memory.search import embeddings
from tenants.audit import audit_record
from tenants.auth import backends
from tenants.middleware import SESSION_PRIVACY_ONLY_KEY, SESSION_TENANT_KEY
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal
from tenants.selectors import members_for_tenant

PAGE = "memory/privacy.html"
SETTINGS = "memory/settings.html"
LINK_CONFIRM = "memory/link_confirm.html"
LINK_INVALID = "memory/link_invalid.html"


def _filters(data: Any) -> tuple[pages.Filters, str, bool]:
    """The page's search and category from `data` (GET or POST); if they are not valid, the
    error (the page then shows no facts, and says why) and whether the search was at fault."""
    form = MemoryFilterForm(data)
    if not form.is_valid():
        error = next(e for errs in form.errors.values() for e in errs)
        return pages.Filters(), error, "q" in form.errors
    return (
        pages.Filters(q=form.cleaned_data["q"], category=form.cleaned_data["category"]),
        "",
        False,
    )


def _links(request: HttpRequest) -> bool:
    # A privacy link's session reaches this page only: a link elsewhere would log it out.
    return request.session.get(SESSION_PRIVACY_ONLY_KEY) is None


def _context(
    request: HttpRequest, subject: Any, filters: pages.Filters, error: str = "", bad_q=False
) -> dict[str, Any]:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    context = pages.privacy_context(principal, subject, filters, links=_links(request))
    if error:
        context.update(groups=[], shown=0, filter_error=error, search_invalid=bad_q)
    return context


@require_GET
@require_scope(Scope.READ)
def privacy(request: HttpRequest) -> HttpResponse:
    """Everything remembered about me (or, with support access, about a member), searched
    and filtered by category; htmx asks for the list alone as someone types."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    subject = selectors.subject_for(principal, request.GET.get("subject"))
    filters, error, bad_q = _filters(request.GET)
    context = _context(request, subject, filters, error, bad_q)
    if not context["own"]:
        audit_record(
            tenant=principal.tenant,
            actor=principal,
            action="memory.support_viewed",
            target_type="auth.user",
            target_id=str(subject.pk),
            after=filters.as_query() if filters.active else None,
        )
    status = 400 if error else 200
    if is_partial(request):
        # The search box is not swapped while someone types in it: the category it sends
        # travels out of band, and so does its text after a link changed the filters.
        context["oob"] = True
        context["sync_search"] = request.htmx.trigger != "memory-search"  # type: ignore[attr-defined]
        response = render(request, f"{PAGE}#memory-list", context, status=status)
        response["HX-Trigger"] = json.dumps({"memory-searched": {"message": _found(context)}})
        return vary_on_htmx(response)
    if context["may_support"]:
        context["members"] = members_for_tenant(tenant=principal.tenant)
    if context["own"]:
        context.update(assistant.section(principal, may_create=_links(request)))
    return vary_on_htmx(render(request, PAGE, context, status=status))


def own_page_context(request: HttpRequest) -> dict[str, Any]:
    """The signed-in person's own privacy page, unfiltered (for actions answered in it)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    context = _context(request, principal.user, pages.Filters())
    context.update(assistant.section(principal, may_create=_links(request)))
    return context


def _found(context: dict[str, Any]) -> str:
    if context.get("filter_error"):
        return context["filter_error"]
    count, shown = context["count"], context["shown"]
    if context["filters"].active:
        return f"{shown} of {count} fact{pluralize(count)} shown."
    return f"All {count} fact{pluralize(count)} shown."


def _own_fact(request: HttpRequest, fact_id: uuid.UUID):
    """A fact of the signed-in person; 404 for anyone else's (support access is read-only)."""
    return selectors.fact_for(request.principal, fact_id)  # type: ignore[attr-defined]


@require_POST
@require_scope(Scope.READ)
def fact_edit(request: HttpRequest, fact_id: uuid.UUID) -> HttpResponse:
    """Correct a fact: a new version; the old one is kept as its history."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    fact = _own_fact(request, fact_id)
    form = FactEditForm(request.POST)
    filters, _, _ = _filters(request.POST)
    error, status = "", 200
    if form.is_valid():
        try:
            fact = services.fact_edit(actor=principal, fact=fact, text=form.cleaned_data["text"])
        except AppError as exc:
            error, status = exc.message, exc.status
    else:
        error, status = "; ".join(e for errs in form.errors.values() for e in errs), 400
    if not is_partial(request):
        if error:
            return vary_on_htmx(
                render(request, "memory/error.html", {"error": error}, status=status)
            )
        return redirect(filters.page_url())
    fact = selectors.fact_for(principal, fact.pk)
    fact.history = selectors.history_of(  # type: ignore[attr-defined]
        tenant_id=principal.tenant.pk, subject_id=fact.subject_id, lineages=[fact.lineage]
    ).get(fact.lineage, [])
    if _links(request):
        pages.add_source_links(principal, [fact])
    pages.with_triggers([fact], filters)
    context = {
        "fact": fact,
        "own": True,
        "filters": filters,
        "error": error,
        "draft": request.POST.get("text", ""),
    }
    response = render(request, f"{PAGE}#fact", context, status=status)
    if not error:
        response["HX-Trigger"] = json.dumps({"memory-changed": {"message": "Fact updated."}})
    return vary_on_htmx(response)


@require_http_methods(["GET", "POST"])
@require_scope(Scope.READ)
def fact_delete(request: HttpRequest, fact_id: uuid.UUID) -> HttpResponse:
    """GET: ask first, inside the page (htmx) or on a page of its own. POST: forget one fact
    completely (every version, its embedding, summaries quoting it)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    fact = _own_fact(request, fact_id)
    filters, _, _ = _filters(request.GET if request.method == "GET" else request.POST)
    if request.method == "GET":
        return confirmation_response(request, pages.delete_confirmation(fact, filters))
    services.fact_delete(actor=principal, fact=fact)
    if is_partial(request):
        # The whole list again: a group may now be empty and the counts have changed.
        context = {**_context(request, principal.user, filters), "deleted": True}
        response = render(request, f"{PAGE}#memory-list", context)
        response["HX-Trigger"] = json.dumps({"memory-changed": {"message": "Fact deleted."}})
        return vary_on_htmx(response)
    messages.success(request, "Fact deleted.")
    return redirect(filters.page_url())


@require_POST
@require_scope(Scope.READ)
def delete_all(request: HttpRequest) -> HttpResponse:
    """Forget everything remembered about me in this tenant (confirmed by a checkbox)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    form = DeleteAllForm(request.POST)
    if not form.is_valid():
        context = _context(request, principal.user, pages.Filters())
        context["delete_all_error"] = form.errors["confirm"][0]
        return vary_on_htmx(render(request, PAGE, context, status=400))
    services.facts_delete_all(
        actor=principal,
        tenant_id=principal.tenant.pk,
        subject_id=principal.user.pk,  # type: ignore[union-attr]
    )
    return redirect("memory:my_memory")


@require_GET
@require_scope(Scope.READ)
def export(request: HttpRequest) -> HttpResponse:
    """Everything remembered about me, with history, and my conversations, as JSON."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    subject = selectors.subject_for(principal, None)
    data = selectors.export(tenant_id=principal.tenant.pk, subject=subject)
    response = JsonResponse(data, json_dumps_params={"indent": 2})
    stamp = timezone.now().strftime("%Y%m%d")
    response["Content-Disposition"] = f'attachment; filename="my-memory-{stamp}.json"'
    return response


# --- tenant settings (admins) ---------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@require_scope(Scope.ADMIN)
def memory_settings(request: HttpRequest) -> HttpResponse:
    """Support access, and the category policies (TTL, cap, whether agents may write)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    policy_form = PolicyForm(initial={"max_facts_per_subject": 200, "agents_may_write": True})
    status = 200
    if request.method == "POST":
        if "support" in request.POST:
            access = SupportAccessForm(request.POST)
            access.is_valid()
            services.support_access_set(
                actor=principal, enabled=access.cleaned_data.get("support_access", False)
            )
            return redirect("memory:memory_settings")
        policy_form = PolicyForm(request.POST)
        if policy_form.is_valid():
            try:
                services.policy_set(actor=principal, **policy_form.cleaned_data)
                return redirect("memory:memory_settings")
            except AppError as exc:
                policy_form.add_error(None, exc.message)
        status = 400
    context = {
        "support_access": category_rules.support_access(principal.tenant.pk),
        "rules": category_rules.categories(principal.tenant.pk).values(),
        "custom": set(
            MemoryPolicy.objects.for_tenant(principal.tenant).values_list("category", flat=True)
        ),
        "policy_form": policy_form,
        "embeddings_on": embeddings.get_provider() is not None,
        "provider": embeddings.current_model_name(),
    }
    return render(request, SETTINGS, context, status=status)


# --- the one-time privacy link --------------------------------------------------------------------


@never_cache
@require_http_methods(["GET", "POST"])
def privacy_link(request: HttpRequest, token: str) -> HttpResponse:
    """GET: whose page the link opens, with one button (spends nothing). POST: redeem it."""
    try:
        holder = links.link_redeem(token) if request.method == "POST" else links.link_check(token)
    except AppError as exc:
        context = {"error": exc.message}
        return _private(render(request, LINK_INVALID, context, status=exc.status))
    if request.method == "GET":
        return _private(render(request, LINK_CONFIRM, {"holder": holder}))
    login(request, holder.user, backend=backends.PATH)
    request.session[SESSION_TENANT_KEY] = str(holder.tenant.pk)
    # Set after login(), which clears it: a link's session reaches only this privacy page.
    request.session[SESSION_PRIVACY_ONLY_KEY] = str(holder.tenant.pk)
    return redirect("memory:my_memory")


def _private(response: HttpResponse) -> HttpResponse:
    # The token is in the URL: it must not travel to another site in a Referer header.
    # ("no-referrer" would also blank the Origin of the form's POST, which CSRF checks.)
    response["Referrer-Policy"] = "same-origin"
    return response
