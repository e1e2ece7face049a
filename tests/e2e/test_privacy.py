"""An end user opens the privacy page, edits one fact, deletes another, exports everything,
and the agent's next run no longer retrieves the deleted fact. An admin's memory settings."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from memory.facts import remember
from memory.privacy import links
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in
from tests.memory.test_engine import payments, replies, run_desk  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def words_only_url(django_db_setup, django_db_blocker):
    """A console whose searches match by words only: cold, the local embedding model takes
    some 20 s to load on these CPUs (a real server warms it as it starts)."""
    proc, url = processes.start_asgi("console-words-only", MEMORY_EMBEDDING_PROVIDER="none")
    yield url
    proc.stop()


@pytest.fixture
def acme(settings):
    settings.MEMORY_EMBEDDING_PROVIDER = "none"  # the in-process runs rank by full text
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    carol = factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant, carol


def test_an_end_user_edits_deletes_and_exports_and_the_agent_forgets(
    page,
    console_url,
    acme,
    payments,  # noqa: F811
):
    tenant, carol = acme
    run_desk(carol, "Please refund $40 for order A-1002, charged twice. Contact me by email.")
    with tenant_scope(tenant.pk):
        remember.fact_remember(
            tenant_id=tenant.pk, subject_id=carol.user_id, category="profile", text="Lives in Lyon"
        )
    log_in(page, console_url, "carol")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My memory").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("What we remember about you")
    expect(page.get_by_text("Learned in a conversation on")).to_be_visible()
    screenshot(page, "privacy-page")

    lyon = page.locator(".memory-fact", has_text="Lives in Lyon")
    lyon.get_by_text("Edit").click()
    lyon.get_by_label("Correct this fact").fill("Lives in Paris")
    lyon.get_by_role("button", name="Save").click()
    paris = page.locator(".memory-fact", has_text="Lives in Paris")
    expect(paris).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Fact updated.")
    expect(paris.get_by_text("History: 1 earlier version")).to_be_visible()

    page.get_by_role("link", name=re.compile("Delete the fact “Prefers to be contacted")).click()
    page.get_by_role("group", name="Delete this fact?").get_by_role("button", name="Delete").click()
    expect(page.get_by_text("Prefers to be contacted by email")).to_have_count(0)
    expect(page.get_by_role("status")).to_have_text("Fact deleted.")
    paris.get_by_text("History: 1 earlier version").click()
    screenshot(page, "privacy-page-after-edit-and-delete")

    with page.expect_download() as download:
        page.get_by_role("link", name="Export everything as JSON").click()
    exported = json.loads(open(download.value.path()).read())
    assert [f["text"] for f in exported["facts"]] == ["Lives in Paris"]
    assert exported["facts"][0]["history"][0]["text"] == "Lives in Lyon"
    assert "Contact me by email" in json.dumps(exported["sessions"])  # their own transcript
    assert "Prefers to be contacted" not in json.dumps(exported)

    later = run_desk(carol, "Please refund $40 for order A-1002, charged twice")
    assert "as you prefer" not in replies(later)[-1]
    page.reload()
    expect(page.get_by_text("Prefers to be contacted")).to_have_count(0)


def test_an_end_user_opens_their_privacy_link_and_reaches_that_page_only(
    page, console_url, acme, settings
):
    tenant, carol = acme
    settings.SECRET_KEY = processes.CHILD_SECRET_KEY  # the link is signed for the server
    with tenant_scope(tenant.pk):
        remember.fact_remember(
            tenant_id=tenant.pk, subject_id=carol.user_id, category="profile", text="Lives in Lyon"
        )
        url, _ = links.link_make(tenant_id=tenant.pk, subject_id=carol.user_id)
    page.goto(console_url + url)
    expect(page.get_by_role("heading", level=1)).to_have_text("Your privacy page")
    expect(page.get_by_role("main")).to_contain_text("privacy page of carol at Acme")
    screenshot(page, "privacy-link-confirm")
    page.reload()  # looking again (or a mail scanner's GET) spends nothing

    page.get_by_role("button", name="Open my privacy page").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("What we remember about you")
    expect(page.locator(".fact-text")).to_have_text(["Lives in Lyon"])
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link")).to_have_text(["My memory"])
    screenshot(page, "privacy-link-page")

    page.goto(console_url + "/runs/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/runs/$"))
    log_in(page, console_url, "carol")
    expect(nav.get_by_role("link", name="Runs")).to_be_visible()  # the whole console again
    page.goto(console_url + "/runs/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs")

    page.goto(console_url + url)  # used: a clear page, not a login loop
    expect(page.get_by_role("alert")).to_contain_text("already used")


def test_an_admin_grants_support_access_and_sets_a_policy(page, console_url, acme):
    log_in(page, console_url, "ada")
    page.goto(console_url + "/memory/settings/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory settings")
    page.get_by_label("Grant support access").check()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_label("Grant support access")).to_be_checked()
    page.get_by_label("Category", exact=True).fill("diet")
    page.get_by_label("Keep for (days)").fill("30")
    page.get_by_role("button", name="Save policy").click()
    expect(page.get_by_role("row", name=re.compile("diet"))).to_contain_text("30 days")
    screenshot(page, "memory-settings")


def test_an_end_user_searches_filters_by_category_and_deletes_with_the_keyboard(
    page,
    words_only_url,
    acme,
    payments,  # noqa: F811
):
    tenant, carol = acme
    run = run_desk(carol, "Please refund $40 for order A-1002, charged twice. Contact me by email.")
    with tenant_scope(tenant.pk):
        for category, text in [
            ("profile", "Lives in Lyon"),
            ("profile", "Works as a nurse"),
            ("preference", "Prefers morning appointments"),
        ]:
            remember.fact_remember(
                tenant_id=tenant.pk, subject_id=carol.user_id, category=category, text=text
            )
    log_in(page, words_only_url, "carol")
    page.goto(words_only_url + "/memory/")
    overview = page.get_by_role("navigation", name="Facts by category")
    expect(overview.get_by_role("link")).to_have_text(
        [
            re.compile(r"4\s+All categories"),
            re.compile(r"2\s+Preferences"),
            re.compile(r"2\s+About you"),
        ]
    )
    screenshot(page, "privacy-overview-1280")

    # Typing filters the list as it goes (htmx), and the address follows for the back button.
    page.evaluate("window.__marker = 'same page'")
    page.get_by_label("Search what we remember about you").press_sequentially("lyo", delay=40)
    expect(page.locator(".fact-text")).to_have_text(["Lives in Lyon"])
    expect(page).to_have_url(re.compile(r"/memory/\?q=lyo$"))
    expect(page.locator("#memory-search-status")).to_have_text("1 of 4 facts shown.")
    expect(page.get_by_label("Search what we remember about you")).to_be_focused()
    assert page.evaluate("window.__marker") == "same page"
    screenshot(page, "privacy-search-1280")

    # A category keeps the search; "All categories" lifts it; focus stays on the link.
    page.get_by_label("Search what we remember about you").fill("")
    expect(page.locator(".fact-text")).to_have_count(4)
    overview.get_by_role("link", name=re.compile("About you")).click()
    expect(page.locator(".fact-text")).to_have_text(["Works as a nurse", "Lives in Lyon"])
    expect(overview.get_by_role("link", name=re.compile("About you"))).to_have_attribute(
        "aria-current", "true"
    )
    expect(overview.get_by_role("link", name=re.compile("About you"))).to_be_focused()
    page.get_by_label("Search what we remember about you").fill("nurse")
    expect(page.locator(".fact-text")).to_have_text(["Works as a nurse"])
    expect(page).to_have_url(re.compile(r"q=nurse&category=profile"))
    overview.get_by_role("link", name=re.compile("All categories")).click()
    expect(overview.get_by_role("link", name=re.compile("All categories"))).to_have_attribute(
        "aria-current", "true"
    )
    expect(page.locator(".fact-text")).to_have_text(["Works as a nurse"])
    page.get_by_role("link", name="Show every fact").click()
    expect(page.locator(".fact-text")).to_have_count(4)

    # The fact learned in the conversation links to it, and to the run that learned it.
    email = page.locator(".memory-fact", has_text="Prefers to be contacted by email")
    expect(email.locator(".fact-source")).to_contain_text("Source: the conversation “ada”")
    expect(email.get_by_role("link", name=re.compile("^run "))).to_have_attribute(
        "href", re.compile(rf"/runs/{run.pk}/(#msg-\d+)?$")
    )

    # Delete asks inside the page, by keyboard: Keep is focused, Enter keeps, focus returns.
    nurse = page.locator(".memory-fact", has_text="Works as a nurse")
    delete = nurse.get_by_role("link", name="Delete the fact “Works as a nurse”")
    delete.focus()
    page.keyboard.press("Enter")
    question = nurse.get_by_role("group", name="Delete this fact?")
    expect(question.get_by_role("link", name="Keep")).to_be_focused()
    screenshot(page, "privacy-delete-question-1280")
    page.set_viewport_size({"width": 375, "height": 800})
    question.scroll_into_view_if_needed()
    screenshot(page, "privacy-delete-question-375")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.keyboard.press("Enter")
    expect(delete).to_be_focused()
    page.keyboard.press("Enter")
    expect(question.get_by_role("link", name="Keep")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(question.get_by_role("button", name="Delete")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_text("Works as a nurse")).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="Fact deleted.")).to_be_visible()
    expect(page.locator("#memory-summary")).to_be_focused()
    assert page.evaluate("window.__marker") == "same page"

    email.locator(".fact-source").get_by_role("link", name=re.compile("conversation")).click()
    expect(page).to_have_url(re.compile(rf"/conversations/{run.session_id}/(#pos-\d+)?$"))
    page.go_back()
    expect(page.get_by_text("Works as a nurse")).to_have_count(0)  # it never comes back


def test_the_privacy_page_without_javascript_searches_and_asks_on_a_page(
    browser, words_only_url, acme
):
    tenant, carol = acme
    with tenant_scope(tenant.pk):
        for text in ["Lives in Lyon", "Works as a nurse"]:
            remember.fact_remember(
                tenant_id=tenant.pk, subject_id=carol.user_id, category="profile", text=text
            )
    context = browser.new_context(java_script_enabled=False, viewport={"width": 375, "height": 800})
    page = context.new_page()
    try:
        log_in(page, words_only_url, "carol")
        page.goto(words_only_url + "/memory/")
        page.get_by_label("Search what we remember about you").fill("nurse")
        page.get_by_role("button", name="Search").click()
        expect(page).to_have_url(re.compile(r"/memory/\?q=nurse"))
        expect(page.locator(".fact-text")).to_have_text(["Works as a nurse"])
        screenshot(page, "privacy-search-nojs-375")
        page.get_by_role("link", name="Delete the fact “Works as a nurse”").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Delete this fact?")
        screenshot(page, "privacy-delete-page-375")
        page.get_by_role("button", name="Delete").click()
        expect(page).to_have_url(re.compile(r"/memory/\?q=nurse$"))
        expect(page.get_by_role("status").filter(has_text="Fact deleted.")).to_be_visible()
        expect(page.locator(".fact-text")).to_have_count(0)
    finally:
        context.close()


def test_a_fact_an_integration_stored_as_json_reads_as_lines_on_the_privacy_page(
    page, words_only_url, acme
):
    tenant, carol = acme
    value = {
        "text": "Travel profile",
        "seat": {"side": "window", "rows": [12, 14]},
        "meals": ["vegetarian", "no nuts"],
        "loyalty": {"programme": "Flying Blue", "tier": "Gold", "since": 2019},
        "note": "Prefers to board last and sit near the wing; gets travel-sick at the back. " * 4,
        "emergency_contact": {"name": "Bob", "relation": "brother"},
        "vip": True,
        "updated": "2026-11-30",
        "channels": {"sms": False, "email": True},
    }
    with tenant_scope(tenant.pk):
        remember.fact_remember(
            tenant_id=tenant.pk,
            subject_id=carol.user_id,
            category="preference",
            value=value,
            key="travel",
            source_kind="api",
            ttl_minutes=60 * 24 * 7,
        )
        remember.fact_remember(
            tenant_id=tenant.pk, subject_id=carol.user_id, category="profile", text="Lives in Lyon"
        )
    log_in(page, words_only_url, "carol")
    page.goto(f"{words_only_url}/memory/")
    fact = page.locator(".memory-fact", has_text="Travel profile")
    expect(fact.locator("dt", has_text="seat.side")).to_be_visible()
    expect(fact.locator("dd", has_text="vegetarian, no nuts")).to_be_visible()
    expect(fact.get_by_text("more lines")).to_be_visible()  # the rest folded
    assert "{" not in fact.locator(".fact-value").first.inner_text()
    screenshot(page, "privacy-json-fact-1280")
    fact.get_by_text("more lines").click()
    expect(fact.locator("dt", has_text="channels.email")).to_be_visible()
    fact.get_by_text("Show all").click()
    expect(fact.get_by_text("Show less")).to_be_visible()
    page.set_viewport_size({"width": 375, "height": 800})
    screenshot(page, "privacy-json-fact-375")
    # Searched by a leaf's words.
    page.get_by_label("Search what we remember about you").fill("Flying Blue")
    expect(page.locator("#memory-summary")).to_contain_text("1 of 2 facts")
