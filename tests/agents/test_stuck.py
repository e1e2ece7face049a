"""Stuck detection: each reason flags the runs it should, and only those."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from agents.console import stuck
from agents.console.stuck import detect_stuck
from agents.runtime.models import Run
from approvals.models import ApprovalRequest
from tenants.scope import tenant_scope
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db


def reasons(run: Run) -> list[str]:
    """The reasons from the SQL conditions, checked against the page's Python rules."""
    now = timezone.now()
    with tenant_scope(run.tenant_id):
        in_sql = [r.code for r in stuck.diagnose(run, now)]
        fresh = Run.objects.get(pk=run.pk)
        in_python = [r.code for r in stuck.reasons_in_python([fresh], now)[run.pk]]
    assert in_python == in_sql
    return in_sql


def aged(run: Run, **fields) -> Run:
    """Set timestamps the ORM would not let us set on create."""
    with tenant_scope(run.tenant_id):
        Run.objects.filter(pk=run.pk).update(**fields)
        return Run.objects.get(pk=run.pk)


def test_a_running_run_whose_lease_expired_is_stuck_because_its_worker_was_lost(tenant_a):
    dead = make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(1))
    alive = make_run(tenant_a, status="running", lease_owner="w:2", lease_expires_at=ago(-60))
    assert reasons(dead) == ["lease_expired"]
    assert reasons(alive) == []


def test_a_run_that_failed_when_its_retries_ran_out_is_stuck_until_retried(tenant_a):
    spent = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    refused = make_run(tenant_a, status="failed", error={"code": "agent_failed"})
    assert reasons(spent) == ["retries_exhausted"]
    assert reasons(refused) == []


def test_a_run_waiting_for_an_approval_past_its_deadline_is_stuck(tenant_a):
    late = make_run(tenant_a, status="waiting_approval", current_step="done")
    early = make_run(tenant_a, status="waiting_approval", current_step="done")
    with tenant_scope(tenant_a.pk):
        for run, due in [(late, ago(60)), (early, ago(-3600))]:
            ApprovalRequest.objects.create(
                tenant=tenant_a, run=run, checkpoint_seq=1, step="ask", action="x", due_at=due
            )
    assert reasons(late) == ["approval_overdue"]
    assert reasons(early) == []


def test_a_sleeping_run_past_its_wake_time_and_the_grace_period_is_stuck(tenant_a, settings):
    settings.AGENTSTATE_STUCK_TIMER_GRACE_SECONDS = 60
    overslept = make_run(tenant_a, status="waiting_timer", not_before=ago(120))
    just_due = make_run(tenant_a, status="waiting_timer", not_before=ago(10))
    assert reasons(overslept) == ["timer_overdue"]
    assert reasons(just_due) == []


def test_a_run_queued_longer_than_the_threshold_is_stuck_because_no_worker_took_it(
    tenant_a, settings
):
    settings.AGENTSTATE_STUCK_QUEUED_SECONDS = 300
    waiting = aged(make_run(tenant_a, status="queued"), created_at=ago(600), queued_at=ago(600))
    requeued = aged(make_run(tenant_a, status="running"), created_at=ago(600), queued_at=ago(600))
    # A step finished a moment ago and queued it again: the database notes when.
    requeued = aged(requeued, status="queued")
    backing_off = aged(
        make_run(tenant_a, status="queued", not_before=ago(-30)), created_at=ago(600)
    )
    fresh = make_run(tenant_a, status="queued")
    assert reasons(waiting) == ["queued_too_long"]
    assert reasons(requeued) == []
    assert reasons(backing_off) == []
    assert reasons(fresh) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"agent": "retired_agent"},
        {"current_step": "removed_step"},
        {"agent_version": 3},  # newer than the deployed version 2: a rollback
        {"state_schema_version": 9},
    ],
    ids=["agent", "step", "agent-version", "state-version"],
)
def test_a_run_needing_code_that_is_not_deployed_is_stuck(tenant_a, fields):
    missing = make_run(tenant_a, status="queued", **fields)
    assert reasons(missing) == ["code_missing"]


def test_a_run_that_failed_because_its_code_was_missing_is_stuck(tenant_a):
    failed = make_run(tenant_a, status="failed", error={"code": "unknown_agent"})
    assert reasons(failed) == ["code_missing"]


def test_healthy_and_finished_runs_are_not_stuck(tenant_a):
    runs = [
        make_run(tenant_a, status="queued"),
        make_run(tenant_a, status="waiting_event", waiting_for="shipped"),
        make_run(tenant_a, status="succeeded", current_step="gone"),
        make_run(tenant_a, status="cancelled", agent="retired_agent"),
    ]
    assert [reasons(r) for r in runs] == [[], [], [], []]


def test_a_run_marked_resolved_leaves_the_stuck_list_until_it_changes_again(tenant_a):
    run = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    resolved = aged(run, resolved_at=timezone.now(), updated_at=ago(1))
    assert reasons(resolved) == []
    changed = aged(run, updated_at=timezone.now())
    assert reasons(changed) == ["retries_exhausted"]


def test_the_stuck_filter_shows_only_one_tenants_runs(tenant_a, tenant_b):
    make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    theirs = make_run(tenant_b, status="failed", error={"code": "retries_exhausted"})
    with tenant_scope(tenant_a.pk):
        found = list(Run.objects.for_tenant(tenant_a).filter(stuck.stuck_q(timezone.now())))
    assert theirs.pk not in [r.pk for r in found] and len(found) == 1


def test_the_beat_job_counts_stuck_runs_of_every_tenant_and_logs_each_with_its_ids(
    tenant_a, tenant_b, caplog
):
    a = make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    make_run(tenant_b, status="failed", error={"code": "retries_exhausted"})
    with caplog.at_level(logging.WARNING, logger="agents.console.stuck"):
        counts = detect_stuck()
    assert counts["lease_expired"] == 1 and counts["retries_exhausted"] == 1
    logged = [r for r in caplog.records if getattr(r, "run_id", "") == str(a.pk)]
    assert logged and logged[0].tenant_id == str(tenant_a.pk)
