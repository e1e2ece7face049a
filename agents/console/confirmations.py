"""The console's actions that ask first (core.confirm): force-releasing a lease, cancelling.

The question carries the version of the run and the last event the admin's page showed, as
every action does: if the run moved on meanwhile, the answer is refused like any other action.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from agents.console import selectors
from agents.runtime.models import Run
from core.confirm import Confirmation, Trigger, confirmation_response
from core.params import positive_int
from tenants.models import Scope
from tenants.permissions import require_scope


@dataclass(frozen=True)
class Question:
    label: str  # the trigger's
    question: str
    detail: str
    confirm_label: str
    keep_label: str


ASKS_FIRST = {
    "release": Question(
        label="Force-release lease",
        question="Take the run away from its worker?",
        detail="Its current step is abandoned and runs again elsewhere.",
        confirm_label="Force-release lease",
        keep_label="Keep the lease",
    ),
    "cancel": Question(
        label="Cancel",
        question="Cancel this run?",
        detail="A step in progress finishes first; then the run stops for good.",
        confirm_label="Cancel run",
        keep_label="Keep it running",
    ),
}


def action_confirmation(run: Run, action: str, *, version: int, seen: int) -> Confirmation:
    asks = ASKS_FIRST[action]
    return Confirmation(
        trigger=Trigger.make(
            reverse("console:console_confirm", args=[run.pk, action]),
            asks.label,
            query={"version": version, "seen": seen},
        ),
        question=asks.question,
        detail=asks.detail,
        confirm_label=asks.confirm_label,
        keep_label=asks.keep_label,
        action_url=reverse("console:console_action", args=[run.pk, action]),
        target="#console-run",
        back_url=reverse("console:console_run", args=[run.pk]),
    )


def trigger(run: Run, action: str) -> Trigger:
    """The action's button on the run page: it asks about the run as the page shows it."""
    return action_confirmation(run, action, version=run.version, seen=run.event_seq).trigger


@require_GET
@require_scope(Scope.ADMIN)
def confirm_action(request: HttpRequest, run_id: uuid.UUID, action: str) -> HttpResponse:
    """The question before `action`, about the version of the run the page showed."""
    if action not in ASKS_FIRST:
        raise Http404
    try:
        run = selectors.tenant_runs(request.principal).get(pk=run_id)  # type: ignore[attr-defined]
    except (Run.DoesNotExist, ValueError):
        raise Http404 from None
    version = positive_int(request.GET.get("version")) or run.version
    raw_seen = request.GET.get("seen", "")
    seen = 0 if raw_seen == "0" else positive_int(raw_seen) or run.event_seq
    return confirmation_response(
        request, action_confirmation(run, action, version=version, seen=seen)
    )
