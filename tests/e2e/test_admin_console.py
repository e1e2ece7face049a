"""An admin finds a run whose worker was killed, sees why it is stuck, resumes it, and it
completes: real uvicorn, real Celery workers (one killed with SIGKILL), Chromium."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.demo.models import DemoRefund
from agents.runtime.models import AgentSession, Run
from agents.runtime.services import run_start
from config.celery import app as celery_app
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    carol = factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant, factories.principal_for(carol)


@pytest.fixture
def workers(console_url):
    celery_app.control.purge()
    env = {
        "DEMO_PAYMENTS_URL": console_url + "/demo/payments/refunds",
        "AGENTSTATE_LEASE_SECONDS": "2",
    }
    started: list[processes.Proc] = []

    def start(name: str, **extra: str) -> processes.Proc:
        proc = processes.start_worker(name, **{**env, **extra})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def load(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def test_an_admin_resumes_a_run_whose_worker_was_killed_and_it_completes(
    page, console_url, acme, workers
):
    tenant, customer = acme
    victim = workers("e2e-console-victim", LLM_SCRIPTED_DELAY_SECONDS="30")
    with tenant_scope(tenant.pk):
        session = AgentSession.objects.create(
            tenant=tenant, agent="refund_desk", user=customer.user
        )
        run = run_start(
            principal=customer,
            agent="refund_desk",
            session=session,
            input={"customer": "carol", "message": "Please refund $40 for order A-1002"},
        )
    processes.wait_until(
        lambda: (r := load(run)).status == "running" and r.current_step == "model",
        timeout=30,
        what="the first model step (the model call) to start",
    )
    victim.kill9()  # mid-step: the lease is never renewed, no beat runs to recover it
    workers("e2e-console-rescuer")  # alive, but nothing tells it about the run

    log_in(page, console_url, "ada")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Console").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs console")
    row = page.locator(f"#console-row-{run.pk}")
    expect(row).to_contain_text("Running")
    processes.wait_until(
        lambda: _expired(load(run)),
        timeout=15,
        what="the dead worker's lease to expire",
    )
    page.get_by_label("Stuck", exact=True).select_option("lease_expired")
    expect(row).to_contain_text("Lease expired, not yet taken back")
    page.reload()  # the counts load after the list, in a request of their own
    expect(page.locator("#console-summary")).to_contain_text("Lease expired, not yet taken back 1")
    screenshot(page, "console-runs-stuck")

    row.get_by_role("link", name="refund_desk").click()
    expect(page).to_have_url(re.compile(rf"/console/runs/{run.pk}/$"))
    reasons = page.locator("#stuck-reasons")
    expect(reasons).to_contain_text("Lease expired, not yet taken back")
    expect(reasons).to_contain_text("its lease expired")
    expect(reasons).to_contain_text("Suggested: Resume it")
    screenshot(page, "console-run-stuck")

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#console-run .notice")).to_contain_text("Resumed")
    processes.wait_until(
        lambda: load(run).status in ("succeeded", "failed"), timeout=60, what="the run to end"
    )
    page.reload()
    expect(page.locator("#console-status")).to_contain_text("Succeeded")
    lost = page.locator(".timeline .attempt-lost")
    expect(lost).to_contain_text("Worker lost")
    expect(lost).to_contain_text(
        re.compile(
            r"lost \(last seen alive at \d\d:\d\d:\d\d\) during step 1 \(model\), "
            r"attempt 1 — (ran at least \d|how long it ran is not known)"
        )
    )
    expect(page.locator("#stuck-reasons")).to_have_count(0)
    screenshot(page, "console-run-resumed")

    done = load(run)
    assert done.status == "succeeded", done.error
    assert DemoRefund.objects.filter(idempotency_key__startswith=str(run.pk)).count() == 1


def _expired(run: Run) -> bool:
    from django.utils import timezone

    return run.lease_expires_at is not None and run.lease_expires_at < timezone.now()


def test_an_admin_sees_the_state_schema_refuse_an_edit_and_the_checkpoint_diffs(
    page, console_url, acme
):
    tenant, customer = acme
    from tests.e2e.test_runs import failed_run

    run = failed_run(tenant, customer.user)
    log_in(page, console_url, "ada")
    page.goto(f"{console_url}/console/runs/{run.pk}/")
    expect(page.locator("#console-status")).to_contain_text("Failed")
    page.get_by_label(re.compile("State JSON")).fill('{"history": ')
    page.get_by_role("button", name="Save state").click()
    expect(page.locator("#state-errors")).to_contain_text("Line 1, column 13: A value was expected")
    screenshot(page, "console-run-state-error")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
