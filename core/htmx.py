"""Pages that htmx swaps in part: which requests want a fragment, and caching them apart."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
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
