"""Migration 0007 folds the rows a step used to write on its own (a successful StepAttempt
and a step.finished RunEvent) into the step's checkpoint, and the timeline reads the same."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest
from django.db import connection

from agents.runtime import selectors
from agents.runtime.models import Checkpoint, RunEvent, RunEventLog, StepAttempt
from tenants.scope import tenant_scope
from tests import factories

pytestmark = pytest.mark.django_db

migration = importlib.import_module(
    "agents.runtime.migrations.0007_checkpoint_carries_attempt_and_event"
)
T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def old_style_run(tenant):
    """A run as version 0006 of the engine left it: one retried step, then its success."""
    with tenant_scope(tenant.pk):
        run = factories._run_row(tenant)
        Checkpoint.objects.create(
            tenant=tenant,
            run=run,
            seq=1,
            step="s",
            next_step="t",
            state={"a": 1},
            schema_version=1,
        )
        common = {"tenant": tenant, "run": run, "seq": 1, "step": "s", "worker": "w1"}
        StepAttempt.objects.create(
            **common,
            attempt=1,
            started_at=T0,
            ended_at=T0,
            outcome="retrying",
            error_code="rate_limited",
        )
        StepAttempt.objects.create(
            **common,
            attempt=2,
            started_at=T0,
            ended_at=T0,
            outcome="succeeded",
            duration_ms=3.25,
        )
        RunEvent.objects.create(tenant=tenant, run=run, seq=1, kind="step.started")
        RunEvent.objects.create(
            tenant=tenant,
            run=run,
            seq=2,
            kind="step.finished",
            data={
                "step": "s",
                "step_seq": 1,
                "attempt": 2,
                "status": "running",
                "next_step": "t",
                "duration_ms": 3.2,
            },
        )
    return run


def test_folding_moves_the_successful_attempt_and_its_event_into_the_checkpoint(tenant_a):
    run = old_style_run(tenant_a)
    with connection.cursor() as cursor:
        cursor.execute(migration.FOLD_SQL)
    with tenant_scope(tenant_a.pk):
        cp = Checkpoint.objects.for_tenant(tenant_a).get(run=run, seq=1)
        assert (cp.attempt, cp.worker, cp.duration_ms, cp.event_seq, cp.status) == (
            2,
            "w1",
            3.25,
            2,
            "running",
        )
        left = StepAttempt.objects.for_tenant(tenant_a).filter(run=run)
        assert [(a.attempt, a.outcome) for a in left] == [(1, "retrying")]
        assert [e.kind for e in RunEvent.objects.for_tenant(tenant_a).filter(run=run)] == [
            "step.started"
        ]
        log = list(RunEventLog.objects.for_tenant(tenant_a).filter(run=run).order_by("seq"))
        assert [(e.seq, e.kind) for e in log] == [(1, "step.started"), (2, "step.finished")]
        assert log[1].data == {
            "step": "s",
            "step_seq": 1,
            "attempt": 2,
            "status": "running",
            "next_step": "t",
            "duration_ms": 3.3,
        }
        timeline = selectors.run_timeline(run)["attempts"]
        assert [(a.attempt, a.outcome, a.worker) for a in timeline] == [
            (1, "retrying", "w1"),
            (2, "succeeded", "w1"),
        ]


def test_folding_twice_changes_nothing_more(tenant_a):
    run = old_style_run(tenant_a)
    with connection.cursor() as cursor:
        cursor.execute(migration.FOLD_SQL)
        cursor.execute(migration.FOLD_SQL)
    with tenant_scope(tenant_a.pk):
        assert RunEventLog.objects.for_tenant(tenant_a).filter(run=run).count() == 2
        assert StepAttempt.objects.for_tenant(tenant_a).filter(run=run).count() == 1
