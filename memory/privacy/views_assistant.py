"""The privacy page's "Connect your assistant" section: a person makes and revokes their own
MCP tokens (tenants/personal_tokens.py), which reach only their own memories at /mcp.

Everyone with a membership may, whatever their role: these are their own memories, which they
may already read, correct and delete on this page. A privacy link's session may not: its
middleware logs it out of these views (they are not privacy-only views), and the page shows
it no form.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.errors import AppError
from core.htmx import is_partial, vary_on_htmx
from memory.forms import AssistantTokenForm
from memory.privacy import assistant
from memory.privacy.views import PAGE, own_page_context
from tenants import personal_tokens
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal

SECTION = "memory/assistant.html#assistant"


def section(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    return assistant.section(principal, may_create=True, **extra)


def _answer(request: HttpRequest, context: dict[str, Any], status: int, message: str = ""):
    """The section alone (htmx), or the whole privacy page around it."""
    if is_partial(request):
        response = render(request, SECTION, context, status=status)
        if message:
            response["HX-Trigger"] = json.dumps({"memory-changed": {"message": message}})
        return vary_on_htmx(response)
    full = {**own_page_context(request), **context}
    return vary_on_htmx(render(request, PAGE, full, status=status))


@never_cache  # the answer holds the token, the one time it is shown
@require_POST
@require_scope(Scope.READ)
def token_create(request: HttpRequest) -> HttpResponse:
    """Make a token for my own memories; the answer shows it once, with the config to paste."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    form = AssistantTokenForm(request.POST)
    if not form.is_valid():
        return _answer(request, section(request, form=form), 400)
    try:
        created = personal_tokens.token_create(
            actor=principal,
            name=form.cleaned_data["name"],
            write=form.cleaned_data["access"] == "write",
            expires_in_days=form.expires_in_days(),
        )
    except AppError as exc:
        return _answer(request, section(request, form=form, error=exc.message), exc.status)
    context = section(request, created=created)
    return _answer(request, context, 201, "Token created: copy it now, it is shown once.")


@require_POST
@require_scope(Scope.READ)
def token_revoke(request: HttpRequest, token_id: uuid.UUID) -> HttpResponse:
    """Revoke one of my tokens: the assistant using it is refused from its next call on."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    key = personal_tokens.token_of(tenant=principal.tenant, user=principal.user, token_id=token_id)
    if key is None:
        raise Http404  # someone else's, another tenant's, or none: the same answer
    try:
        personal_tokens.token_revoke(actor=principal, key=key)
    except AppError as exc:
        return _answer(request, section(request, error=exc.message), exc.status)
    if not is_partial(request):
        return redirect(reverse("memory:my_memory") + "#assistant")
    return _answer(request, section(request), 200, f"Token “{key.name}” revoked.")
