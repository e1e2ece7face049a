"""Pages that htmx swaps in part: which requests want a fragment, and caching them apart."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers


def is_partial(request: HttpRequest) -> bool:
    """An htmx swap asks for a fragment; a history restore needs the whole page."""
    htmx = request.htmx  # type: ignore[attr-defined]  # django_htmx's HtmxMiddleware
    return bool(htmx) and not htmx.history_restore_request


def vary_on_htmx(response: HttpResponse) -> HttpResponse:
    """`response` marked to vary on HX-Request: page and fragment share a URL, and caches
    must keep them apart."""
    patch_vary_headers(response, ["HX-Request"])
    return response


def render_fragments(
    request: HttpRequest, templates: list[str], context: dict[str, Any], *, status: int = 200
) -> HttpResponse:
    """Several fragments in one answer: the first is the swap's target, the others carry
    `hx-swap-oob` (each gets `oob` in its context), such as a list and its filter form."""
    parts = [render_to_string(templates[0], context, request)]
    parts += [render_to_string(t, {**context, "oob": True}, request) for t in templates[1:]]
    return HttpResponse("".join(parts), status=status)
