"""The README's five-minute tour, in Chromium: alice asks the refund desk for a refund in her
own words, it waits for a manager; mia sees it live and approves; alice's chat says it is done
and by which channel, her memory page shows what was remembered, and she deletes it. A real
Celery worker runs the demo agent. Screenshots at 1280 and 375 px (var/screens/tour-*)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from config.celery import app as celery_app
from tenants.models import Role
from tests import factories, processes
from tests.demo_refunds import demo_refunds
from tests.e2e.conftest import BASE_DIR
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENS = BASE_DIR / "var" / "screens"
# As a person writes it: no "$" after "refund", lower-case order id, two sentences.
ASK = "Hi! I was charged twice for order a-1001, can I get a refund of 400? I prefer WhatsApp."


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("alice"))
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    return tenant


@pytest.fixture
def worker(console_url):
    celery_app.control.purge()
    proc = processes.start_worker(
        "e2e-tour-worker", DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds"
    )
    yield proc
    proc.stop()


def shots(page, name: str) -> None:
    """The page at 1280 and 375 px; at 375 nothing runs off the side."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"tour-{name}-1280.png"), full_page=True)
    page.set_viewport_size({"width": 375, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), name
    page.screenshot(path=str(SCREENS / f"tour-{name}-375.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})


def test_the_five_minute_tour_from_the_readme(browser, page, console_url, acme, worker):
    # 1. alice asks in her own words.
    log_in(page, console_url, "alice")
    page.goto(console_url + "/conversations/")
    expect(page.get_by_role("heading", name="Or start with one of these")).to_be_visible()
    page.get_by_label("Your message").fill(ASK)
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page).to_have_url(re.compile(r"/conversations/[0-9a-f-]{36}/$"))
    reply = page.locator("#chat-log .from-agent").last
    expect(reply).to_contain_text("Waiting for a manager", timeout=30_000)
    shots(page, "alice-waits")

    # 2. mia sees the request live and approves it.
    manager = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    log_in(manager, console_url, "mia")
    manager.goto(console_url + "/approvals/")
    row = manager.locator("table.inbox tbody tr").filter(has_text="issue_refund")
    expect(row).to_contain_text("400.00")
    manager.screenshot(path=str(SCREENS / "tour-mia-inbox-1280.png"), full_page=True)
    row.get_by_role("link", name=re.compile("^Review")).click()
    expect(manager.locator(".reason")).to_contain_text("Refund 400.00 USD for order A-1001")
    manager.get_by_role("button", name="Approve", exact=True).click()
    expect(manager.locator("#decision")).to_contain_text("Approved by mia")
    shots(manager, "mia-approved")
    manager.context.close()

    # 3. alice's chat says it is done, by the channel she prefers, without a reload.
    expect(reply).to_contain_text("Done: 400.00 refunded for order A-1001", timeout=30_000)
    expect(reply).to_contain_text("by WhatsApp, as you prefer")
    fact = reply.locator(".chat-facts a")
    expect(fact).to_have_text("Prefers to be contacted by WhatsApp")
    shots(page, "alice-done")
    assert len(demo_refunds()) == 1  # refunded once

    # 4. Her memory page shows it; she deletes it.
    fact.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("What we remember about you")
    expect(page.get_by_role("main")).to_contain_text("Prefers to be contacted by WhatsApp")
    shots(page, "alice-memory")
    page.get_by_role("link", name=re.compile("Delete the fact “Prefers to be contacted")).click()
    page.get_by_role("group", name="Delete this fact?").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status")).to_have_text("Fact deleted.")
    expect(page.get_by_role("main")).not_to_contain_text("Prefers to be contacted by WhatsApp")
    shots(page, "alice-forgotten")
