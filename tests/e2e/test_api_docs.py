"""The API's Swagger page works under the strict Content-Security-Policy."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_swagger_page_lists_the_operations_without_a_csp_violation(page, console_url):
    # The `page` fixture fails the test on any console error, CSP violations included.
    response = page.goto(console_url + "/api/docs/")
    assert "style-src 'self';" in response.headers["content-security-policy"]
    expect(page.get_by_role("heading", name="AgentState API")).to_be_visible()
    runs = page.locator(".opblock", has_text="/api/v1/runs/").first
    expect(runs).to_be_visible()
    screenshot(page, "api-docs-1280")
    runs.locator(".opblock-summary-control").click()  # the operation opens, rendered by React
    expect(runs.get_by_role("button", name="Try it out")).to_be_visible()
    page.set_viewport_size({"width": 375, "height": 800})
    screenshot(page, "api-docs-375")
