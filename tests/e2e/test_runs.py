"""A manager starts the demo refund run, watches it pause, approves it, and it refunds once."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.demo_refunds import demo_refunds
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    return tenant


@pytest.fixture
def worker(console_url):
    # The scripted model waits a little, so the page shows the run before it pauses.
    proc = processes.start_worker(
        "e2e-runs-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        LLM_SCRIPTED_DELAY_SECONDS="2",
    )
    yield proc
    proc.stop()


def test_a_manager_starts_the_demo_run_approves_it_and_it_refunds_exactly_once(
    page, console_url, acme, worker
):
    log_in(page, console_url, "mia")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs")
    expect(page.get_by_label("Message")).to_have_value(
        "Please refund $400 for order A-1001, I was charged twice"
    )
    page.locator("#id_agent").select_option("refund_desk")
    page.get_by_label("Customer").fill("ada@example.com")
    page.get_by_role("button", name="Start run").click()

    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    status = page.locator("#summary-heading")
    expect(status).to_contain_text(re.compile("Queued|Running"))  # the model takes 2 s
    page.evaluate("window.__marker = 'same page'")
    expect(status).to_contain_text("Waiting for approval", timeout=20_000)
    assert page.evaluate("window.__marker") == "same page"  # polled, not reloaded
    approval = page.locator("article.approval")
    expect(approval).to_contain_text("Refund 400.00 USD for order A-1001")
    # model, tools (billing), model (decides), tools: pauses before issue_refund
    expect(page.locator(".timeline")).to_contain_text("Step 4: tools")
    screenshot(page, "run-waiting-approval")

    comment = page.get_by_label("Comment (optional)")
    comment.fill("Charged twice, confirmed in billing.")
    page.wait_for_timeout(2500)  # a few polls: unchanged content is not swapped over the draft
    expect(comment).to_have_value("Charged twice, confirmed in billing.")
    page.get_by_role("button", name="Approve").click()
    expect(status).to_contain_text("Succeeded", timeout=20_000)
    assert page.evaluate("window.__marker") == "same page"
    expect(approval).to_contain_text("Approved by mia")
    transcript = page.locator(".transcript")
    expect(transcript).to_contain_text("Please refund $400 for order A-1001")
    # The reply is the last assistant message (the tool calls before it have no text).
    expect(transcript.locator(".msg-assistant").last).to_contain_text(
        "Done: 400.00 refunded for order A-1001"
    )
    expect(page.locator("table.ledger")).to_contain_text("issue_refund")
    screenshot(page, "run-succeeded")

    ledger = demo_refunds()
    assert len(ledger) == 1, ledger
    assert ledger[0]["amount_cents"] == 40000

    page.get_by_role("link", name="Runs", exact=True).first.click()
    expect(page.get_by_role("cell", name="Succeeded")).to_be_visible()
    screenshot(page, "runs-list")
    page.get_by_role("link", name="Agent registry").click()
    expect(page.get_by_role("heading", name="refund_desk")).to_be_visible()
    screenshot(page, "agents")


def failed_run(tenant, user):
    """A failed run with long JSON, long unbroken strings and a long traceback, as rows."""
    from django.utils import timezone

    from agents.runtime.models import AgentSession, Checkpoint, Message, Run, StepAttempt, ToolCall

    now = timezone.now()
    token = "tok_" + "x" * 220  # one unbroken word, wider than any screen
    frames = "".join(
        f'  File "/srv/agentstate/agents/engine/some/deeply/nested/module_{i}.py", line {i}, '
        f"in step_function_with_a_long_name_{i}\n    result = call({token!r})\n"
        for i in range(30)
    )
    traceback = f"Traceback (most recent call last):\n{frames}KeyError: 'missing'\n"
    with tenant_scope(tenant.pk):
        session = AgentSession.objects.create(tenant=tenant, agent="refund_desk", user=user)
        run = Run.objects.create(
            tenant=tenant,
            session=session,
            agent="refund_desk",
            agent_version=1,
            status="failed",
            current_step="decide",
            step_seq=1,
            attempts=2,
            input={"customer": "ada@example.com", "message": token},
            error={"code": "step_raised", "message": f"KeyError: {token}", "class": "KeyError"},
            created_by=user,
            started_at=now,
            finished_at=now,
        )
        state = {"history": [{"order": f"A-{i:04}", "note": token} for i in range(40)]}
        Checkpoint.objects.create(
            tenant=tenant, run=run, seq=1, step="lookup", state=state, schema_version=1
        )
        for attempt, outcome in [(1, "retrying"), (2, "failed")]:
            StepAttempt.objects.create(
                tenant=tenant,
                run=run,
                seq=2,
                attempt=attempt,
                step="decide",
                worker="worker-host-with-a-long-name:12345",
                started_at=now,
                ended_at=now,
                outcome=outcome,
                error_class="builtins.KeyError",
                error_code="step_raised",
                message=f"'missing' {token}",
                traceback=traceback,
            )
        ToolCall.objects.create(
            tenant=tenant,
            run=run,
            seq=1,
            call_index=0,
            tool="issue_refund",
            idempotency_key=f"{run.pk}:1:0:{token[:200]}",
            status="succeeded",
            sends=1,
            result={"refund_id": "re_1", "note": token},
        )
        Message.objects.create(tenant=tenant, session=session, seq=1, role="user", content=token)
    return run


@pytest.mark.parametrize("width", [1280, 390])
def test_a_failed_run_with_long_json_and_tracebacks_stays_inside_the_page(
    page, console_url, acme, width
):
    from django.contrib.auth import get_user_model

    run = failed_run(acme, get_user_model().objects.get(username="mia"))
    page.set_viewport_size({"width": width, "height": 800})
    log_in(page, console_url, "mia")
    page.goto(f"{console_url}/runs/{run.pk}/")
    expect(page.locator("#summary-heading")).to_contain_text("Failed")
    for summary in page.locator("main summary").all():
        summary.click()
    expect(page.locator("details[open] pre").first).to_be_visible()
    expect(page.get_by_text("Failed, will retry")).to_be_visible()
    screenshot(page, f"run-failed-{width}")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.goto(console_url + "/runs/")
    screenshot(page, f"runs-list-{width}")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
