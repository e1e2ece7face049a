"""Someone guesses a password until sign-in locks; an admin unlocks it on the members page.
And API keys that expire."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from tenants.models import ApiKey, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def log_in(page, url: str, username: str, password: str = factories.PASSWORD) -> None:
    page.goto(url + "/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_a_locked_sign_in_is_explained_and_an_admin_unlocks_it(browser, page, console_url):
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("alice"))

    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(page, console_url, "alice", "guess")
    log_in(page, console_url, "alice")  # the right password, too late
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign-in locked")
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-in attempts.")
    screenshot(page, "login-lockout")

    admin = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    log_in(admin, console_url, "ada")
    admin.goto(console_url + "/admin/members/")
    row = admin.locator("tr", has_text="alice")
    expect(row).to_contain_text("Locked out")
    screenshot(admin, "members-locked")
    row.get_by_role("button", name="Unlock").click()
    expect(row).not_to_contain_text("Locked out")
    admin.context.close()

    log_in(page, console_url, "alice")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()


def test_an_admin_makes_a_key_that_expires_and_sees_expired_ones(page, console_url):
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    old = factories.make_api_key(tenant, ["read"]).key
    with tenant_scope(tenant.pk):
        ApiKey.objects.for_tenant(tenant).filter(pk=old.pk).update(
            expires_at=timezone.now() - timedelta(days=1)
        )
    log_in(page, console_url, "ada")
    page.goto(console_url + "/admin/api-keys/")
    page.get_by_label("Name").fill("nightly export")
    page.get_by_label("Expires in (days)").fill("30")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("status")).to_contain_text("Copy this key now")
    fresh = page.locator("tr", has_text="nightly export")
    expect(fresh).to_contain_text((timezone.now() + timedelta(days=30)).strftime("%Y-%m-%d"))
    expect(page.locator(f"#key-{old.pk}")).to_contain_text("expired")
    screenshot(page, "api-keys-expiry")
