"""An end user connects their own assistant from the privacy page: makes a token (shown once,
with the config to paste), the assistant reads their memories with it at /mcp, the page lists
it without the secret, and once revoked the assistant is refused."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from memory.facts import remember
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.e2e.conftest import SCREENSHOTS, screenshot
from tests.e2e.test_console_basics import log_in
from tests.memory.test_mcp import call, post_tools_list

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def section_shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#assistant").screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def test_a_person_connects_an_assistant_and_revokes_it(page, console_url):
    tenant = factories.make_tenant("acme")
    carol = factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    with tenant_scope(tenant.pk):
        remember.fact_remember(
            tenant_id=tenant.pk, subject_id=carol.user_id, category="profile", text="Lives in Lyon"
        )
    log_in(page, console_url, "carol")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My memory").click()
    section = page.locator("#assistant")
    expect(section.get_by_role("heading", name="Connect your assistant")).to_be_visible()
    section_shot(page, "assistant-empty-1280")

    section.get_by_label("Name").fill("Laptop Claude")
    section.get_by_label("Read, add, correct and delete my memories").check()
    section.get_by_label("Expires").select_option(label="in 30 days")
    section.get_by_role("button", name="Make the token").click()
    expect(page.get_by_role("status").first).to_have_text(
        "Token created: copy it now, it is shown once."
    )
    raw = page.locator("#assistant-new-token").inner_text()
    assert re.fullmatch(r"mcp_[0-9a-f]{32}_[A-Za-z0-9_-]{43}", raw)
    config = json.loads(page.locator("#assistant-config").inner_text())
    server = config["mcpServers"]["agentstate-memory"]
    assert server["headers"] == {"Authorization": f"Bearer {raw}"}
    assert server["url"].endswith("/mcp")
    section_shot(page, "assistant-created-1280")
    screenshot(page, "privacy-assistant-1280")
    page.set_viewport_size({"width": 375, "height": 800})
    section_shot(page, "assistant-created-375")
    page.set_viewport_size({"width": 1280, "height": 800})

    # The assistant, with the pasted token, reads Carol's memories.
    (listed,) = call(console_url, raw, ("memory_list", {}))
    assert [f["text"] for f in listed.structured_content["facts"]] == ["Lives in Lyon"]

    page.reload()
    expect(page.locator("#assistant-new-token")).to_have_count(0)
    assert raw not in page.content()
    token = section.locator(".assistant-token", has_text="Laptop Claude")
    expect(token).to_contain_text("Reads and changes your memories")
    expect(token).to_contain_text("Last used")
    page.set_viewport_size({"width": 375, "height": 800})
    section_shot(page, "assistant-listed-375")
    screenshot(page, "privacy-assistant-375")

    token.get_by_role("button", name="Revoke the token “Laptop Claude”").click()
    expect(page.get_by_role("status").first).to_have_text("Token “Laptop Claude” revoked.")
    expect(section.locator(".assistant-token", has_text="Laptop Claude")).to_contain_text("Revoked")
    assert post_tools_list(console_url, f"Bearer {raw}").status_code == 401
