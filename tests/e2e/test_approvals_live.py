"""The approvals inbox over the live websocket, in Chromium: a request started elsewhere
appears in a manager's open inbox, and another manager's decision takes it out, with no
reload and no polling."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants.models import Role
from tests import factories, processes
from tests.e2e.conftest import screenshot
from tests.e2e.test_approvals import run_status, start_refund
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    for name in ("mia", "max"):
        factories.make_member(tenant, Role.MANAGER, user=factories.make_user(name))
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant


@pytest.fixture
def worker(console_url):
    proc = processes.start_worker(
        "e2e-approvals-live-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        AGENTSTATE_CONSOLE_URL=console_url,
    )
    yield proc
    proc.stop()


def test_a_request_appears_in_an_open_inbox_and_leaves_it_when_another_manager_decides(
    page, browser, console_url, acme, worker
):
    log_in(page, console_url, "mia")
    page.goto(console_url + "/approvals/")
    inbox = page.locator("#inbox-list")
    expect(inbox).to_contain_text("Nothing is waiting for a decision.")
    badge = page.locator("#approvals-badge")
    expect(badge).to_have_text("")
    page.evaluate("window.__marker = 'same page'")
    requests_made: list[str] = []
    page.on("request", lambda r: r.resource_type != "websocket" and requests_made.append(r.url))

    run = start_refund(acme, "carol")  # a customer's conversation, run by the real worker
    row = inbox.locator("table.inbox tbody tr").filter(has_text="issue_refund")
    expect(row).to_contain_text("400.00", timeout=30_000)
    expect(row).to_contain_text("You may decide")
    expect(inbox.locator(".inbox-counts")).to_contain_text("1 pending")
    expect(badge).to_contain_text("1")
    assert run_status(run) == "waiting_approval"
    screenshot(page, "approvals-live-arrived")

    other = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        second = other.new_page()
        log_in(second, console_url, "max")
        second.goto(console_url + "/approvals/")
        second.locator("table.inbox tbody tr").filter(has_text="issue_refund").get_by_role(
            "link", name=re.compile("^Review")
        ).click()
        expect(second.get_by_role("heading", level=1)).to_have_text("issue_refund for 400.00")
        second.get_by_role("button", name="Approve", exact=True).click()
        expect(second.locator("#decision")).to_contain_text("Approved by max")
    finally:
        other.close()

    expect(inbox).to_contain_text("Nothing is waiting for a decision.", timeout=10_000)
    expect(row).to_have_count(0)
    expect(badge).to_have_text("")
    page.get_by_label("Status").select_option("decided")  # the decision, as it was recorded
    decided = inbox.locator("table.inbox tbody tr").filter(has_text="issue_refund")
    expect(decided).to_contain_text("Approved")
    expect(decided).to_contain_text("by max")
    assert page.evaluate("window.__marker") == "same page"  # never reloaded
    # Nothing was fetched over HTTP until the filter changed: the socket brought it all.
    fetched = [url for url in requests_made if "/static/" not in url]
    assert all("status=decided" in url for url in fetched), fetched
    screenshot(page, "approvals-live-decided")
    processes.wait_until(lambda: run_status(run) == "succeeded", timeout=30, what="the refund")
