"""Sending work to the Celery workers by task name, so that what enqueues (services, the engine,
sweeps, features) need not import the tasks that import it back."""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import current_app

RUN_STEP = "agents.run_step"


def enqueue_run(
    *, tenant_id: Any, run_id: Any, countdown: float | None = None, eta: dt.datetime | None = None
) -> None:
    """Queue a slice of the run. Duplicates are harmless: only one claim can succeed."""
    current_app.send_task(
        RUN_STEP,
        kwargs={"tenant_id": str(tenant_id), "run_id": str(run_id)},
        countdown=countdown,
        eta=eta,
    )
