"""A person logs in, moves around the console, manages API keys and logs out."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tenants.models import ApiKey, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    admin = factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    globex = factories.make_tenant("globex")
    factories.make_member(globex, Role.VIEWER, user=admin.user)
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("alice"))
    return tenant


def log_in(page, url: str, username: str, password: str = factories.PASSWORD) -> None:
    page.goto(url + "/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_a_wrong_password_shows_an_error_and_stays_on_login(page, console_url, acme):
    log_in(page, console_url, "ada", "wrong password")
    expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    screenshot(page, "login-error")


def test_an_admin_logs_in_and_sees_every_section(page, console_url, acme):
    page.goto(console_url + "/")
    expect(page).to_have_url(console_url + "/login/?next=/")
    screenshot(page, "login")
    log_in(page, console_url, "ada")
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    nav = page.get_by_role("navigation", name="Main")
    for name in ["Runs", "Conversations", "Approvals", "My memory", "Console", "Admin"]:
        expect(nav.get_by_role("link", name=name)).to_be_visible()
    screenshot(page, "home-admin")
    nav.get_by_role("link", name="My memory").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("What we remember about you")
    screenshot(page, "my-memory")


def test_a_member_does_not_see_the_admin_section(page, console_url, acme):
    log_in(page, console_url, "alice")
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Runs")).to_be_visible()
    expect(nav.get_by_role("link", name="Admin")).to_have_count(0)
    page.goto(console_url + "/admin/api-keys/")
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()


def test_an_admin_creates_a_key_sees_it_once_and_revokes_it_without_reloading(
    page, console_url, acme
):
    log_in(page, console_url, "ada")
    page.goto(console_url + "/admin/api-keys/")
    page.evaluate("window.__marker = 'same page'")
    page.get_by_label("Name").fill("chat-ops bot")
    page.get_by_label("Decide approvals").check()
    page.get_by_role("button", name="Create key").click()
    raw = page.locator("#new-key").inner_text()
    assert raw.startswith(f"ak_{acme.pk.hex}_")
    expect(page.get_by_role("cell", name="chat-ops bot", exact=True)).to_be_visible()
    screenshot(page, "api-keys-created")

    # Revoking asks first, in the key's row (no browser dialog); Cancel puts the row back.
    page.get_by_role("link", name="Revoke chat-ops bot").click()
    question = page.get_by_role("group", name="Revoke chat-ops bot?")
    expect(question.get_by_role("link", name="Cancel")).to_be_focused()
    screenshot(page, "api-keys-revoke-question")
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="Revoke chat-ops bot")).to_be_focused()
    page.get_by_role("link", name="Revoke chat-ops bot").click()
    question.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("cell", name="revoked")).to_be_visible()
    assert page.evaluate("window.__marker") == "same page"  # htmx swapped, no reload
    with tenant_scope(acme.pk):
        assert ApiKey.objects.for_tenant(acme).get().revoked_at is not None

    page.reload()
    expect(page.locator("#new-key")).to_have_count(0)  # shown once, never again


def test_a_user_in_two_tenants_switches_between_them(page, console_url, acme):
    log_in(page, console_url, "ada")
    page.locator("details.account > summary").click()  # the switcher waits behind who you are
    page.get_by_label("Tenant").select_option(label="Globex (viewer)")
    page.get_by_role("button", name="Switch").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Globex")
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin")
    ).to_have_count(0)
    screenshot(page, "home-switched")


def test_logging_out_ends_the_session(page, console_url, acme):
    log_in(page, console_url, "ada")
    page.get_by_role("button", name="Log out").click()
    page.goto(console_url + "/")
    expect(page).to_have_url(console_url + "/login/?next=/")
