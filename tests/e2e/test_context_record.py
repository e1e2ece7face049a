"""The context record in Chromium: a person watches her run's page; when its first step packs
a context for the model (a real worker), the section appears without a reload, names the
provider that answered, and links the remembered fact it quoted to her privacy page.

Screenshots: var/screens/context-<who>-<width>.png.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from agents.runtime.models import Run
from agents.runtime.services import conversation_start
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.test_approvals import run_status
from tests.e2e.test_console_basics import log_in
from tests.memory.conftest import remember

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / "var" / "screens"
FACT = "Prefers to be contacted by email"


@pytest.fixture
def carol():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    return factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))


def start_refund(membership) -> Run:
    """Carol's conversation with the refund desk; it waits in the queue for a worker."""
    principal = factories.principal_for(membership)
    with tenant_scope(principal.tenant.pk):
        return conversation_start(
            principal=principal,
            agent="refund_desk",
            message="Please refund $40 for order A-1002",
            input={"customer": "ada@example.com"},
        )


def start_worker(console_url: str) -> processes.Proc:
    return processes.start_worker(
        "e2e-context-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        DEMO_REFUND_APPROVAL_THRESHOLD="1000",  # $40 goes straight through
        LLM_SCRIPTED_DELAY_SECONDS="0.5",
        MEMORY_EMBEDDING_PROVIDER="none",  # facts are found by their words
    )


def shoot(page, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)
        page.screenshot(path=str(SCREENS / f"context-{name}-{width}.png"), full_page=True)
        page.locator("#run-context").screenshot(
            path=str(SCREENS / f"context-{name}-{width}-section.png")
        )
        sideways = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        # What runs off the side, named in the failure.
        wide = page.evaluate(
            "[...document.querySelectorAll('#run-context *')]"
            ".filter(e => e.getBoundingClientRect().right > innerWidth)"
            ".slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert sideways <= 0, f"the run page scrolls sideways by {sideways}px at {width}px {wide}"
    page.set_viewport_size({"width": 1280, "height": 900})


def test_the_context_section_appears_live_when_a_step_packs_and_links_the_quoted_fact(
    page, console_url, carol
):
    fact = remember(carol, FACT, key="contact.channel")
    run = start_refund(carol)
    log_in(page, console_url, "carol")
    page.goto(f"{console_url}/runs/{run.pk}/")
    section = page.locator("#run-context")
    expect(section).to_contain_text("No step of this run has packed a context yet")
    page.evaluate("window.__marker = 'same page'")

    worker = start_worker(console_url)
    try:
        record = page.locator("#context-1-0")
        expect(record).to_be_visible(timeout=30_000)
        expect(record.locator(".answered-by")).to_have_text("scripted")
        link = record.get_by_role("link", name=f"“{FACT}”")
        expect(link).to_have_attribute("href", f"/memory/#fact-{fact.pk}")
        expect(record.locator(".chart-stacked [data-series='memory']")).to_have_count(1)
        assert page.evaluate("window.__marker") == "same page"  # no reload
        processes.wait_until(lambda: run_status(run) == "succeeded", timeout=30, what="the run")
        expect(page.locator("#context-3-0")).to_be_visible(timeout=10_000)  # the second call
    finally:
        worker.stop()
    assert page.evaluate("window.__marker") == "same page"
    shoot(page, "person")

    link.click()
    expect(page).to_have_url(f"{console_url}/memory/#fact-{fact.pk}")
    expect(page.locator(f"#fact-{fact.pk}")).to_contain_text(FACT)

    # A manager without support access sees what the fact is, not what it says.
    page.context.clear_cookies()
    log_in(page, console_url, "mia")
    page.goto(f"{console_url}/runs/{run.pk}/")
    record = page.locator("#context-1-0")
    expect(record).to_contain_text("contact.channel")
    expect(record).not_to_contain_text(FACT)
    expect(record.locator("a.fact-text")).to_have_count(0)
    record.get_by_text("The numbers as a table").click()  # opened for the screenshots
    record.get_by_text("Every item, in conversation order").click()
    expect(record.locator(".chart-table table")).to_contain_text("Memories")
    shoot(page, "manager")
