"""One way to ask before a destructive action: inside the page, never `window.confirm()`.

A trigger is a link to the question. With htmx, GET answers with the question as a fragment
that takes the trigger's place, its safe choice focused; that choice ("Keep") GETs the trigger
back, focused again. Without JavaScript the same link opens a page asking the same question.
The confirming button POSTs to the action either way, with the trigger's query as fields.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.htmx import is_partial, vary_on_htmx

TEMPLATE = "core/confirm.html"
PAGE = "core/confirm_page.html"
KEEP = "keep"  # the query parameter that asks for the trigger back


@dataclass(frozen=True)
class Trigger:
    """The button-like link that asks first: `url` answers GET with the question."""

    url: str
    label: str
    hint: str = ""  # the rest of its accessible name (visually hidden): which thing it acts on
    query: tuple[tuple[str, str], ...] = ()  # carried to the question and posted with the answer

    @classmethod
    def make(cls, url: str, label: str, hint: str = "", query: Mapping[str, Any] | None = None):
        kept = tuple((k, str(v)) for k, v in (query or {}).items() if v not in (None, ""))
        return cls(url=url, label=label, hint=hint, query=kept)

    @property
    def slot(self) -> str:
        """The DOM id the trigger and its question share (one per action URL)."""
        return "confirm-" + hashlib.sha1(self.url.encode()).hexdigest()[:12]

    @property
    def href(self) -> str:
        return _with_query(self.url, self.query)

    @property
    def keep_href(self) -> str:
        return _with_query(self.url, (*self.query, (KEEP, "1")))


@dataclass(frozen=True)
class Confirmation:
    """The question a trigger asks, and what answering it does."""

    trigger: Trigger
    question: str
    confirm_label: str
    action_url: str
    target: str  # what the confirmed POST's answer replaces (htmx)
    back_url: str  # where "Keep" goes without JavaScript
    detail: str = ""
    keep_label: str = "Keep"
    swap: str = "outerHTML"


def confirmation_response(request: HttpRequest, confirmation: Confirmation) -> HttpResponse:
    """GET of a trigger's URL: the question (a fragment for htmx, else a page), or with
    ?keep the trigger itself again."""
    keep = KEEP in request.GET
    if not is_partial(request):
        if keep:
            return redirect(confirmation.back_url)
        return vary_on_htmx(render(request, PAGE, {"c": confirmation}))
    if keep:
        context = {"t": confirmation.trigger, "focus": True}
        return vary_on_htmx(render(request, f"{TEMPLATE}#confirm-trigger", context))
    return vary_on_htmx(render(request, f"{TEMPLATE}#confirm-ask", {"c": confirmation}))


def _with_query(url: str, query: tuple[tuple[str, str], ...]) -> str:
    return f"{url}?{urlencode(query)}" if query else url
