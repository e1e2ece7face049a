"""Errors that are neither the step's nor a lost service's: the engine's own (a bug, a broken
row) while claiming a run or between its steps. Each is written where people look (the
run's error, an attempt with the traceback, a step.failed event) and the run leaves
`running`: retried with backoff, since a deploy may fix it, and failed with the reason after
ENGINE_ERROR_LIMIT of them. Never left holding its lease for the recovery sweep to call the
worker lost.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

from agents.runtime import progress
from agents.runtime.engine import store
from agents.runtime.engine.outcomes import enqueue_on_commit
from core import sql

logger = logging.getLogger(__name__)

ENGINE_ERROR_LIMIT = 5  # errors of the engine's own per step before the run fails
BACKOFF_SECONDS = 1.0  # doubled after each
RECORD_CLAIM_ERROR_SQL = sql.load("agents.runtime", "record_claim_error")


def describe(exc: BaseException, code: str) -> dict[str, Any]:
    return {
        "code": code,
        "message": f"{type(exc).__name__}: {exc}"[:2000],
        "class": type(exc).__name__,
    }


def claim_failed(*, tenant_id: str, run_id: Any, worker: str, exc: Exception) -> str | None:
    """Record a claim that raised; returns the run's status after it (None: not recorded,
    because a live worker holds the run or it is gone)."""
    logger.exception("run %s: claiming it failed", run_id)
    error = describe(exc, "claim_failed")
    params = {
        "tenant": str(tenant_id),
        "run": str(run_id),
        "worker": worker,
        "limit": ENGINE_ERROR_LIMIT,
        "backoff": BACKOFF_SECONDS,
        "error": json.dumps(error),
        "error_class": error["class"],
        "message": error["message"],
        "traceback": "".join(traceback.format_exception(exc))[-20000:],
    }
    row = store.execute_for_tenant(RECORD_CLAIM_ERROR_SQL, params)
    if row is None:
        return None
    status, seq, delay = row
    progress.publish(
        tenant_id=tenant_id,
        run_id=run_id,
        kind="step.failed",
        seq=seq,
        committed=True,
        status=status,
        outcome="failed" if status == "failed" else "retrying",
    )
    if status != "failed":
        enqueue_on_commit(str(tenant_id), run_id, countdown=max(0.0, float(delay or 0)))
    return status
