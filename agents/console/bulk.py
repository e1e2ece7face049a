"""One repair applied to many runs from the console's list, each in its own savepoint; a run
that recovered by itself meanwhile is reported as such (recovered.py), not as a conflict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agents.console.recovered import Recovered, recovered_since
from agents.runtime import services
from agents.runtime.errors import RunChanged
from agents.runtime.models import Run
from agents.runtime.repairs import run_resolve, run_resume, run_retry
from core.errors import AppError
from tenants.principal import Principal

BULK_ACTIONS = {
    "retry": run_retry,
    "resume": run_resume,
    "cancel": services.run_cancel,
    "resolve": run_resolve,
}


@dataclass(frozen=True)
class BulkOutcome:
    run_id: str
    ok: bool
    message: str
    recovered: Recovered | None = None  # not done: recovered automatically meanwhile


def runs_bulk(
    *,
    principal: Principal,
    action: str,
    items: list[tuple[Run, int]],
    seen: dict[Any, int | None] | None = None,
) -> list[BulkOutcome]:
    """Apply one action to many runs, each in its own savepoint: one refusal (a 409) does not
    undo the others. A run recovered automatically since the admin's page showed its event
    `seen[run.pk]` needs nothing: it is reported as such, not as a conflict."""
    fn = BULK_ACTIONS[action]
    outcomes = []
    for run, version in items:
        try:
            fn(principal=principal, run=run, version=version)
        except RunChanged as exc:
            fresh = Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)
            shown = (seen or {}).get(run.pk)
            recovered = recovered_since(fresh, seen=shown, now=timezone.now())
            outcomes.append(BulkOutcome(str(run.pk), False, exc.message, recovered))
        except AppError as exc:
            outcomes.append(BulkOutcome(str(run.pk), False, exc.message))
        else:
            outcomes.append(BulkOutcome(str(run.pk), True, ""))
    return outcomes
