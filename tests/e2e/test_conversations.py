"""A manager reads a conversation, forks it at a message, and sees on the run page what
the model was given."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agents.runtime import services
from agents.runtime.engine.runner import drive
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import test_context_steps  # noqa: F401  (registers the packs_context agent)
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def conversation(monkeypatch):
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **_: None)
    tenant = factories.make_tenant("acme")
    manager = factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    principal = factories.principal_for(manager)
    with tenant_scope(tenant.pk):
        run = services.conversation_start(
            principal=principal,
            agent="packs_context",
            message="Please refund $400 for order A-1001, I was charged twice",
            title="Refund for Ada",
        )
    drive(tenant_id=str(tenant.pk), run_id=run.pk, worker="e2e")
    with tenant_scope(tenant.pk):
        services.messages_append(
            tenant_id=tenant.pk,
            session_id=run.session_id,
            run_id=None,
            messages=[
                {"role": "user", "content": "Actually my budget rule: nothing above $250."},
                {"role": "assistant", "content": "Understood: at most $250."},
            ],
        )
    return run


def test_a_manager_forks_a_conversation_and_reads_the_packed_context_of_a_run(
    page, console_url, conversation
):
    log_in(page, console_url, "mia")
    page.goto(f"{console_url}/conversations/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Conversations")
    page.get_by_role("link", name="Refund for Ada").click()
    thread = page.locator("#thread")
    expect(thread.locator("li")).to_have_count(4)
    screenshot(page, "conversation")

    page.get_by_role("button", name="Fork here: continue from message 2").click()
    expect(page).to_have_url(re.compile(r"/conversations/[0-9a-f-]{36}/$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("(fork at 2)")
    expect(page.locator("#thread li.inherited")).to_have_count(2)
    expect(page.locator("#thread")).not_to_contain_text("$250")
    expect(page.get_by_role("navigation", name="Thread")).to_contain_text("Refund for Ada")
    screenshot(page, "conversation-fork")

    page.goto(f"{console_url}/runs/{conversation.pk}/")
    report = page.locator("#run-context")
    expect(report).to_contain_text("Step 1: answer")
    expect(report.locator("table").first).to_contain_text("Current")
    report.get_by_text("Every item, in conversation order").click()
    expect(report).to_contain_text("must include")
    report.scroll_into_view_if_needed()
    screenshot(page, "run-packed-context")
