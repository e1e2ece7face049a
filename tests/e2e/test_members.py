"""An admin invites someone by email; they open the link, choose a password and are in. The
admin changes a role, removes someone after confirming, and cannot remove the last admin."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tenants.models import Role
from tests import factories, processes
from tests.e2e.conftest import BASE_DIR
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCREENS = BASE_DIR / "var" / "screens"
NEW_PASSWORD = "a long and unusual passphrase 7"


@pytest.fixture(scope="module")
def site(django_db_setup, django_db_blocker, tmp_path_factory):
    """A console server of its own whose emails land as files in a folder we can read."""
    mail_dir = tmp_path_factory.mktemp("mail")
    proc, url = processes.start_asgi(
        "members",
        EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        EMAIL_FILE_PATH=str(mail_dir),
    )
    yield url, mail_dir
    proc.stop()


def shot(page, name: str) -> Path:
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"members-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def settled(page) -> None:
    """Wait until htmx has finished swapping (and wired up) what it swapped in."""
    busy = ".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added"
    page.wait_for_function(f"() => !document.querySelector('{busy}')")


def emails(mail_dir: Path) -> list[str]:
    return [p.read_text() for p in sorted(mail_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)]


def link_in_last_email(mail_dir: Path, to: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for text in reversed(emails(mail_dir)):
            if f"To: {to}" in text:
                return re.search(r"https?://[^/\s]+(/invitations/\S+/)", text).group(1)
        time.sleep(0.1)
    raise AssertionError(f"no email to {to}")


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    factories.make_member(tenant, Role.VIEWER, user=factories.make_user("victor"))
    return tenant


def test_an_invited_person_sets_a_password_signs_in_and_sees_the_tenant(browser, page, site, acme):
    url, mail_dir = site
    admin = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(admin, url, "ada")
    admin.goto(url + "/admin/members/")
    invite = admin.get_by_role("region", name="Invite someone")

    # Bad input is answered inline, in the form.
    invite.get_by_label("Email address").fill("not an address")
    invite.get_by_role("button", name="Send invitation").click()
    expect(invite.get_by_role("alert")).to_contain_text("Enter a valid email address")
    expect(invite.get_by_label("Email address")).to_have_attribute("aria-invalid", "true")

    invite = admin.get_by_role("region", name="Invite someone")
    invite.get_by_label("Email address").fill("Nora@Example.com")
    invite.get_by_label("Role").select_option("manager")
    invite.get_by_role("button", name="Send invitation").click()
    expect(admin.get_by_role("status")).to_contain_text("Invitation sent to nora@example.com")
    pending = admin.get_by_role("region", name="Pending invitations")
    row = pending.locator("tr", has_text="nora@example.com")
    expect(row).to_contain_text("Manager")
    expect(row).to_contain_text("ada")
    shot(admin, "1280")

    link = link_in_last_email(mail_dir, "nora@example.com")
    page.goto(url + link)
    expect(page.get_by_role("heading", level=1)).to_have_text("Join Acme")
    expect(page.locator("main")).to_contain_text("as manager")
    shot(page, "accept-1280")
    page.get_by_label("Username").fill("nora")
    page.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Password again").fill("something else entirely")
    page.get_by_role("button", name="Create account and join").click()
    expect(page.get_by_role("alert")).to_contain_text("The two passwords differ.")
    page.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Password again").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Create account and join").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    expect(page.get_by_role("status")).to_contain_text("Welcome to Acme")
    expect(page.locator(".who")).to_contain_text("nora · manager")

    # The link is spent (its owner is just taken to the tenant); the new password works.
    page.goto(url + link)
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    page.context.clear_cookies()
    page.goto(url + link)
    expect(page.get_by_role("heading", level=1)).to_have_text("This invitation cannot be used")
    expect(page.get_by_role("alert")).to_contain_text("already used")
    log_in(page, url, "nora", NEW_PASSWORD)
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals")
    ).to_be_visible()
    expect(page.locator(".who")).to_contain_text("manager")

    admin.reload()
    expect(admin.get_by_role("region", name="Pending invitations")).to_contain_text(
        "No pending invitations."
    )
    expect(admin.locator("tr", has_text="nora")).to_contain_text("nora@example.com")
    admin.context.close()


def test_an_admin_changes_a_role_removes_after_confirming_and_keeps_the_last_admin(
    browser, page, site, acme
):
    url, mail_dir = site
    log_in(page, url, "ada")
    page.goto(url + "/admin/members/")

    # A role change is one select; the row answers in place.
    page.get_by_label("Role of victor").select_option("member")
    expect(page.get_by_label("Role of victor")).to_have_value("member")
    settled(page)  # the row's answer replaces it: a click before then would be lost

    # Removing asks first, in the row; Cancel puts the row back.
    victor = page.locator("tr", has_text="victor")
    victor.get_by_role("link", name="Remove victor").click()
    expect(victor).to_contain_text("Remove victor from Acme?")
    shot(page, "confirm-1280")
    expect(victor.get_by_role("link", name="Cancel")).to_be_focused()
    victor.get_by_role("link", name="Cancel").click()
    expect(victor.get_by_role("link", name="Remove victor")).to_be_visible()
    victor.get_by_role("link", name="Remove victor").click()
    victor.get_by_role("button", name="Remove victor").click()
    expect(page.get_by_role("status")).to_contain_text("victor was removed from Acme.")

    # The last admin stays, with the reason in the row.
    ada = page.locator("tr", has_text="ada")
    ada.get_by_role("link", name="Remove ada").click()
    ada.get_by_role("button", name="Remove ada").click()
    expect(ada.get_by_role("alert")).to_contain_text("last admin")
    settled(page)
    page.get_by_label("Role of ada").select_option("viewer")
    expect(ada.get_by_role("alert")).to_contain_text("at least one admin")
    shot(page, "last-admin-1280")

    # A pending invitation can be revoked, after confirming.
    page.get_by_label("Email address").fill("temp@example.com")
    page.get_by_role("button", name="Send invitation").click()
    row = page.locator("tr", has_text="temp@example.com")
    row.get_by_role("link", name="Revoke the invitation to temp@example.com").click()
    row.get_by_role("button", name="Revoke invitation").click()
    expect(row.get_by_role("status")).to_contain_text("was revoked")

    # Phones: the same page stacks its tables and needs no sideways scrolling.
    page.reload()
    page.get_by_label("Email address").fill("phone@example.com")
    page.get_by_role("button", name="Send invitation").click()
    phone = page.locator("tr", has_text="phone@example.com")
    phone.get_by_role("button", name="Resend").click()
    expect(phone.get_by_role("status")).to_contain_text("Sent again with a new link.")
    settled(page)
    page.set_viewport_size({"width": 375, "height": 800})
    phone.get_by_role("link", name="Revoke").click()
    expect(phone).to_contain_text("Its link stops working.")
    shot(page, "375")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the members page is {width}px wide at 375px"

    link = link_in_last_email(mail_dir, "phone@example.com")
    fresh = browser.new_context(viewport={"width": 375, "height": 800}).new_page()
    fresh.goto(url + link)
    expect(fresh.get_by_role("heading", level=1)).to_have_text("Join Acme")
    shot(fresh, "accept-375")
    assert fresh.evaluate("document.documentElement.scrollWidth") <= 375
    fresh.context.close()
