"""End users see their world, not ours: their run page and list say what happened in plain
words, without hosts, processes, error codes or tracebacks; staff keep the detail."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agents.runtime.models import RunEvent, StepAttempt
from tenants.scope import tenant_scope
from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db

INTERNALS = ("vm:11049", "host-b:77", "worker_lost", "tool_unavailable", "ConnectionError",
             "Traceback (most recent call last)", "10.0.0.7")  # fmt: skip


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


@pytest.fixture
def failed_run(tenant_a, members):
    """A member's run that lost a worker, was recovered, then failed on a tool."""
    run = make_run(
        tenant_a,
        status="failed",
        created_by=members["member"].user,
        finished_at=ago(1),
        error={"code": "tool_unavailable", "message": "payments at 10.0.0.7:8443 refused"},
    )
    with tenant_scope(tenant_a.pk):
        common = {"tenant": tenant_a, "run": run, "seq": 2, "step": "charge"}
        StepAttempt.objects.create(
            **common, attempt=1, worker="vm:11049", started_at=ago(10), ended_at=ago(9),
            outcome="lost", error_code="worker_lost", message="The worker stopped answering",
        )  # fmt: skip
        StepAttempt.objects.create(
            **common, attempt=2, worker="host-b:77", started_at=ago(5), ended_at=ago(4),
            outcome="failed", error_class="ConnectionError", error_code="tool_unavailable",
            message="payments at 10.0.0.7:8443 refused",
            traceback="Traceback (most recent call last):\n  ConnectionError",
        )  # fmt: skip
        for seq, kind, data in (
            (2, "run.lost", {"worker": "vm:11049", "step_seq": 2, "step": "charge", "attempt": 1}),
            (3, "step.started", {"worker": "host-b:77", "recovered": True, "step_seq": 2}),
            (4, "step.failed", {"error": {"code": "tool_unavailable"}, "step_seq": 2}),
        ):
            RunEvent.objects.create(tenant=tenant_a, run=run, seq=seq, kind=kind, data=data)
    return run


def test_an_end_users_run_page_says_what_happened_without_our_internals(client_for, failed_run):
    page = client_for("member").get(f"/runs/{failed_run.pk}/").content.decode()

    shown = {
        i: page[max(0, page.index(i) - 150) : page.index(i) + 50] for i in INTERNALS if i in page
    }
    assert shown == {}
    assert "Something went wrong on our side" in page
    assert "we are retrying" in page and "Recovered automatically" in page


def test_staff_keep_the_detail_on_the_same_run(client_for, failed_run):
    page = client_for("admin").get(f"/runs/{failed_run.pk}/").content.decode()

    assert all(internal in page for internal in ("vm:11049", "worker_lost", "tool_unavailable"))
    assert "Traceback (most recent call last)" in page


def test_an_end_users_runs_list_says_something_went_wrong_not_the_errors_code(
    client_for, failed_run
):
    mine = client_for("member").get("/runs/").content.decode()
    staff = client_for("admin").get("/runs/").content.decode()

    assert "tool_unavailable" not in mine and "something went wrong on our side" in mine
    assert "error: tool_unavailable" in staff


def test_a_lost_run_waiting_for_a_worker_reads_interrupted_for_its_end_user(
    client_for, tenant_a, members
):
    run = make_run(
        tenant_a, status="queued", created_by=members["member"].user, lost_at=timezone.now()
    )
    mine = client_for("member").get(f"/runs/{run.pk}/").content.decode()
    staff = client_for("admin").get(f"/runs/{run.pk}/").content.decode()

    assert "Interrupted — resuming" in mine and "Worker lost" not in mine
    assert "Worker lost — recovering" in staff
