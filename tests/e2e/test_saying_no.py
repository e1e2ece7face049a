"""One way to say no, in a real browser: a list filter with a bad value shows the error beside
its field and in an alert, the list still shows (without that filter), and choosing a good
value clears it; typed in a filter, a bad value is answered the same way without a reload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.runtime.models import Run
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    with tenant_scope(tenant.pk):
        failed = Run.objects.create(
            tenant=tenant,
            agent="refund_desk",
            agent_version=1,
            current_step="model",
            status="failed",
        )
    return tenant, failed


def test_a_list_filter_with_a_bad_value_shows_the_inline_error(page, console_url, acme):
    _, failed = acme
    log_in(page, console_url, "ada")
    page.goto(console_url + "/runs/?status=bogus")

    status = page.get_by_label("Status", exact=True)
    expect(status).to_have_attribute("aria-invalid", "true")
    expect(status).to_have_accessible_description(re.compile("“bogus” is not a status"))
    expect(page.locator("#filter-status-error")).to_have_text(
        re.compile(r"^“bogus” is not a status\. Choose one of: queued, running, ")
    )
    summary = page.get_by_role("alert").filter(has_text="This filter was not applied")
    expect(summary).to_be_visible()
    expect(page.locator(f"#run-row-{failed.pk}")).to_be_visible()  # the list, unfiltered
    screenshot(page, "runs-bad-filter")

    # The summary's link goes to the field; a good value clears the error without a reload.
    summary.get_by_role("link", name="Status").click()
    expect(status).to_be_focused()
    status.select_option("failed")
    expect(page).to_have_url(re.compile(r"/runs/\?status=failed(&|$)"))
    expect(page.get_by_label("Status", exact=True)).not_to_have_attribute("aria-invalid", "true")
    expect(page.locator("#filter-status-error")).to_have_count(0)
    expect(page.locator(".filter-problems")).to_have_count(0)
    expect(page.locator(f"#run-row-{failed.pk}")).to_be_visible()


def test_a_bad_value_typed_in_a_filter_is_answered_inline_and_keeps_the_focus(
    page, console_url, acme
):
    log_in(page, console_url, "ada")
    page.goto(console_url + "/console/")
    worker = page.get_by_label("Lost worker")
    worker.fill("bad worker!")
    worker.press("Enter")
    expect(page.locator("#filter-worker-error")).to_have_text(
        re.compile("^“bad worker!” is not a worker")
    )
    worker = page.get_by_label("Lost worker")
    expect(worker).to_have_attribute("aria-invalid", "true")
    expect(worker).to_be_focused()  # the form came back beside the list; typing goes on
    expect(worker).to_have_value("bad worker!")
    expect(page.locator("#recovered-filters-problems")).to_have_attribute("role", "alert")
    screenshot(page, "console-bad-filter")
    worker.fill("host-a")
    worker.press("Enter")
    expect(page.locator("#filter-worker-error")).to_have_count(0)
    expect(page.locator("#recovered-list")).to_contain_text("No worker was lost")
