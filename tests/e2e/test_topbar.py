"""The top bar: one line for an admin on a desktop, a Menu button on a phone (js/topbar.js), and
everything still reachable without the script.

Screenshots: var/screens/topbar-<state>-<width>.png.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tenants.models import Membership, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.approvals.conftest import make_request
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / "var" / "screens"
NAV = ["Runs", "Conversations", "Approvals", "My memory", "Console", "Admin"]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    admin = factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    # A second tenant: the switcher is part of the bar too.
    factories.make_member(factories.make_tenant("globex"), Role.VIEWER, user=admin.user)
    return tenant


def signed_in(page, console_url: str, username: str) -> None:
    """Log in and wait for the next page's load event: a layout measured before its stylesheet
    arrived reads an unstyled page (links one under another)."""
    log_in(page, console_url, username)
    page.wait_for_url(lambda url: "/login/" not in url, wait_until="load")


def shoot(page, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    width = page.viewport_size["width"]
    page.screenshot(path=str(SCREENS / f"topbar-{name}-{width}.png"))


def serious_violations_in_the_bar(page) -> list[str]:
    results = Axe().run(page, context=".topbar")
    return [
        v["id"] for v in results.response["violations"] if v["impact"] in ("serious", "critical")
    ]


def test_an_admins_top_bar_fits_one_line_on_a_desktop_with_the_account_behind_a_disclosure(
    page, console_url, acme
):
    signed_in(page, console_url, "ada")
    bar = page.locator("header.topbar")
    nav = bar.get_by_role("navigation", name="Main")
    for name in NAV:
        expect(nav.get_by_role("link", name=name)).to_be_visible()
    expect(bar.get_by_role("button", name="Menu")).to_be_hidden()
    account = bar.locator("details.account > summary")
    tops = {round(box["y"]) for box in (nav.bounding_box(), account.bounding_box())}
    links = nav.get_by_role("link")
    tops |= {round(links.nth(i).bounding_box()["y"]) for i in range(links.count())}
    assert bar.bounding_box()["height"] < 70, "the top bar wraps"
    assert max(tops) - min(tops) < 20, tops
    expect(account).to_contain_text("Acme")
    expect(account).to_contain_text("ada · admin")
    expect(bar.get_by_label("Tenant")).to_be_hidden()

    account.click()
    expect(bar.get_by_label("Tenant")).to_be_visible()
    expect(bar.get_by_role("link", name="Change password")).to_be_visible()
    shoot(page, "account-open")
    assert serious_violations_in_the_bar(page) == []
    page.keyboard.press("Escape")
    expect(bar.get_by_label("Tenant")).to_be_hidden()
    expect(account).to_be_focused()


def test_on_a_phone_the_links_fold_behind_a_menu_button_that_says_whether_it_is_open(
    page, console_url, acme, monkeypatch
):
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: None)
    monkeypatch.setattr("approvals.notifications.queue_notification", lambda kwargs: None)
    with tenant_scope(acme.pk):
        make_request(Membership.objects.for_tenant(acme).get(user__username="ada"))
    page.set_viewport_size({"width": 375, "height": 800})
    signed_in(page, console_url, "ada")
    bar = page.locator("header.topbar")
    menu = bar.get_by_role("button", name="Menu")
    expect(menu).to_have_attribute("aria-expanded", "false")
    # Folded, the menu still tells how many requests wait for a decision.
    expect(menu).to_have_accessible_name("Menu 1 waiting for your decision")
    expect(bar.get_by_role("link", name="Runs")).to_be_hidden()
    assert bar.bounding_box()["height"] < 70
    shoot(page, "menu-closed")

    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    for name in NAV:
        expect(bar.get_by_role("link", name=name)).to_be_visible()
    expect(bar.get_by_role("button", name="Log out")).to_be_visible()
    bar.locator("details.account > summary").click()
    expect(bar.get_by_label("Tenant")).to_be_visible()
    shoot(page, "menu-open")
    assert serious_violations_in_the_bar(page) == []
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")

    page.keyboard.press("Escape")  # first the account disclosure, then the menu
    expect(bar.get_by_label("Tenant")).to_be_hidden()
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    expect(bar.get_by_role("link", name="Runs")).to_be_hidden()

    menu.click()
    bar.get_by_role("link", name="Approvals").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approvals")
    expect(menu).to_have_attribute("aria-expanded", "false")  # a new page starts folded


def test_without_javascript_a_phone_shows_every_link_and_no_menu_button(browser, console_url, acme):
    context = browser.new_context(viewport={"width": 375, "height": 800}, java_script_enabled=False)
    page = context.new_page()
    try:
        log_in(page, console_url, "ada")
        bar = page.locator("header.topbar")
        expect(bar.get_by_role("button", name="Menu")).to_be_hidden()
        for name in NAV:
            expect(bar.get_by_role("link", name=name)).to_be_visible()
        bar.locator("details.account > summary").click()  # <details> needs no script
        expect(bar.get_by_label("Tenant")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        shoot(page, "no-script")
    finally:
        context.close()
