"""A manager finds the paused demo refund in the inbox, approves a smaller amount, and watches
the run refund exactly that, once. An admin sets a policy in the console."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.runtime.models import Run
from agents.runtime.services import conversation_start
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.demo_refunds import demo_refunds
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
MESSAGE = "Please refund $400 for order A-1001, I was charged twice"


@pytest.fixture
def acme():
    from django.contrib.auth import get_user_model

    tenant = factories.make_tenant("acme")
    mia = factories.make_user("mia")
    get_user_model().objects.filter(pk=mia.pk).update(email="mia@acme.example")
    factories.make_member(tenant, Role.MANAGER, user=mia)
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant


@pytest.fixture
def mail_dir(tmp_path):
    path = tmp_path / "mail"
    path.mkdir()
    return path


@pytest.fixture
def worker(console_url, mail_dir):
    proc = processes.start_worker(
        "e2e-approvals-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        AGENTSTATE_CONSOLE_URL=console_url,
        EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        EMAIL_FILE_PATH=str(mail_dir),
    )
    yield proc
    proc.stop()


def start_refund(tenant, username: str) -> Run:
    """A customer's conversation with the refund desk, started as the Runs page would."""
    from tenants.models import Membership

    with tenant_scope(tenant.pk):
        membership = Membership.objects.for_tenant(tenant).get(user__username=username)
        return conversation_start(
            principal=factories.principal_for(membership),
            agent="refund_desk",
            message=MESSAGE,
            input={"customer": "ada@example.com"},
            title="ada@example.com",
        )


def run_status(run: Run) -> str:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk).status


def test_a_manager_approves_the_paused_refund_with_a_smaller_amount_and_it_is_refunded_once(
    page, console_url, acme, worker, mail_dir
):
    run = start_refund(acme, "carol")
    processes.wait_until(
        lambda: run_status(run) == "waiting_approval", timeout=30, what="the run to pause"
    )

    log_in(page, console_url, "mia")
    nav = page.get_by_role("navigation", name="Main")
    approvals_link = nav.get_by_role("link", name=re.compile("^Approvals"))
    expect(approvals_link).to_contain_text("1")  # the badge: one request mia may decide
    approvals_link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approvals")
    row = page.locator("table.inbox tbody tr").filter(has_text="issue_refund")
    expect(row).to_contain_text("400.00")
    expect(row).to_contain_text("You may decide")
    screenshot(page, "approvals-inbox")

    row.get_by_role("link", name=re.compile("^Review")).click()
    expect(page).to_have_url(re.compile(r"/approvals/[0-9a-f-]{36}/$"))
    request_url = page.url
    expect(page.get_by_role("heading", level=1)).to_have_text("issue_refund for 400.00")
    expect(page.locator(".reason")).to_contain_text("Refund 400.00 USD for order A-1001")
    expect(page.locator(".transcript")).to_contain_text(MESSAGE)
    expect(page.get_by_text("The step retrieved no remembered facts")).to_be_visible()
    expect(page.locator(".audit-trail")).to_contain_text("approval.requested")
    screenshot(page, "approval-detail")

    page.evaluate("window.__marker = 'same page'")
    page.get_by_text("Change the arguments, then approve").click()
    amount = page.get_by_label("amount", exact=True)
    expect(amount).to_have_value("400.00")
    amount.fill("250")  # not the schema's format: refused, nothing decided
    page.get_by_role("button", name="Approve with these arguments").click()
    expect(page.locator("#decision")).to_contain_text("nothing was decided")
    expect(amount).to_have_attribute("aria-invalid", "true")
    assert run_status(run) == "waiting_approval"
    screenshot(page, "approval-edit-refused")

    amount.fill("250.00")
    page.get_by_label("Comment (optional)").fill("Refunding the duplicate charge only in part.")
    page.get_by_role("button", name="Approve with these arguments").click()
    decision = page.locator("#decision")
    expect(decision).to_contain_text("Approved by mia")
    expect(decision).to_contain_text("Approved with changed arguments")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=20_000)
    # The reply is the last assistant message (the tool calls before it have no text).
    expect(page.locator(".transcript .msg-assistant").last).to_contain_text(
        "Done: 250.00 refunded for order A-1001"
    )
    expect(page.locator(".audit-trail")).to_contain_text("approval.arguments_edited")
    assert page.evaluate("window.__marker") == "same page"  # swapped in place, never reloaded
    expect(approvals_link).not_to_contain_text("1")
    screenshot(page, "approval-decided")

    ledger = demo_refunds()
    assert len(ledger) == 1, ledger
    assert ledger[0]["amount_cents"] == 25000

    # On a phone the pages reflow and nothing runs off the side.
    page.set_viewport_size({"width": 390, "height": 800})
    for url, name in [
        (request_url, "approval-decided-390"),
        (console_url + "/approvals/?status=decided", "approvals-inbox-390"),
    ]:
        page.goto(url)
        screenshot(page, name)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390

    # The email the worker sent on the request's commit links to the same page.
    [mail] = [p.read_text() for p in mail_dir.iterdir()]
    assert "To: mia@acme.example" in mail and "Approval needed: issue_refund for 400.00" in mail
    assert request_url in mail


def test_an_admin_sets_a_policy_that_the_next_refund_follows(page, console_url, acme, worker):
    log_in(page, console_url, "ada")
    page.goto(console_url + "/approvals/")
    page.get_by_role("link", name="Approval policies").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approval policies")
    page.get_by_label("New group").fill("Finance")
    page.get_by_role("button", name="Create group").click()
    expect(page.get_by_role("heading", name="Finance")).to_be_visible()
    page.locator("#group-" + _group_id(page) + " label", has_text="mia").click()
    page.get_by_role("button", name="Save members").click()

    form = page.locator("form.policy-form").last
    form.get_by_label("Action").select_option("issue_refund")
    form.get_by_label("Ask only above this amount").fill("500")
    form.get_by_label("Only members of this group").select_option(label="Finance")
    form.get_by_label("At the deadline").select_option("escalate")  # but no deadline yet
    form.get_by_label("Four eyes: whoever started the run may not approve it").check()
    form.get_by_role("button", name="Add policy").click()
    expect(page.locator(".policy-form .error").first).to_contain_text("Set a deadline")
    form = page.locator("form.policy-form").last
    form.get_by_label("Deadline (minutes after the request)").fill("1440")
    form.get_by_role("button", name="Add policy").click()
    policy = page.locator("article.policy").filter(has_text="issue_refund")
    expect(policy).to_contain_text("when the amount is above 500.00")
    expect(policy).to_contain_text("1440 minutes, then escalate to admins")
    screenshot(page, "approval-policies")

    # $400 is below the new threshold: the policy approves it and the run refunds at once.
    run = start_refund(acme, "carol")
    processes.wait_until(lambda: run_status(run) == "succeeded", timeout=30, what="the refund")
    assert demo_refunds()[0]["amount_cents"] == 40000


def _group_id(page) -> str:
    return page.locator("article.group").first.get_attribute("id").removeprefix("group-")
