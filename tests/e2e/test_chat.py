"""An end user chats with the refund desk in Chromium: she picks the agent on /conversations/,
asks for a refund with the keyboard only, and sees the reply stream in and what the desk
remembered about her, then writes again in the same conversation, all without a reload; a
real Celery worker runs the demo agent. Screenshots at 1280 and 375 px (var/screens/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from agents.runtime.models import Run
from config.celery import app as celery_app
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.conftest import BASE_DIR
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENS = BASE_DIR / "var" / "screens"
ASK = "Please refund $40 for order A-1002, and contact me by email."
# What the page saw of the reply while it streamed, and of the progress words (read after).
WATCH = """() => {
  window.__streamed = []; window.__progress = [];
  new MutationObserver(() => {
    const stream = document.querySelector('#chat-log .llm-stream');
    if (stream) window.__streamed.push(stream.textContent);
    document.querySelectorAll('#chat-log .chat-progress').forEach(
      (p) => window.__progress.push(p.textContent.trim()));
  }).observe(document.querySelector('main'), {childList: true, subtree: true, characterData: true});
}"""


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant


@pytest.fixture
def worker(console_url):
    celery_app.control.purge()
    proc = processes.start_worker(
        "e2e-chat-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        LLM_SCRIPTED_DELAY_SECONDS="2",  # each model call: 1 s thinking, 1 s writing
        MEMORY_WARM_QUERY_MODEL="1",  # as in production: the desk recalls with the model
    )
    # Loading torch took 13-16 s here and over 30 s on a busy CI machine: the reply is timed
    # from the message, as a person sees it, so the worker is ready as a deployed one is.
    processes.wait_until(
        lambda: "embedding model ready" in proc.log(), timeout=120, what="the model to load"
    )
    yield proc
    proc.stop()


def shot(page, name: str) -> Path:
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def runs_of(tenant) -> list[Run]:
    with tenant_scope(tenant.pk):
        return list(Run.objects.for_tenant(tenant).order_by("created_at"))


def test_an_end_user_asks_the_refund_desk_and_sees_the_reply_stream_in_without_a_reload(
    page, console_url, acme, worker
):
    log_in(page, console_url, "carol")
    page.goto(console_url + "/conversations/")
    expect(page.get_by_role("heading", name="Talk to an agent")).to_be_visible()
    expect(page.get_by_label("Customer")).to_have_count(0)  # she is the customer
    shot(page, "chat-start-1280")

    # Keyboard only: choose the agent, write, Tab to Send, Enter.
    agent = page.get_by_label("Agent", exact=True)
    agent.focus()
    agent.select_option(label="Refund desk")
    page.keyboard.press("Tab")
    page.keyboard.type(ASK)
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send")).to_be_focused()
    page.evaluate("window.__marker = 'same page'")
    page.evaluate(WATCH)
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(r"/conversations/[0-9a-f-]{36}/$"))
    conversation_url = page.url
    expect(page.locator("#conversation-list")).to_contain_text("Please refund $40")
    log = page.get_by_role("log")
    expect(log).to_have_attribute("aria-live", "polite")
    expect(log.locator(".from-user")).to_contain_text(ASK)
    [run] = runs_of(acme)
    assert run.input == {"customer": "carol", "message": ASK}
    reply = page.locator(f"#reply-{run.pk}")

    # The desk's words arrive as the model writes them, then as its answer.
    expect(reply.locator(".llm-stream")).to_contain_text("Done:", timeout=30_000)
    shot(page, "chat-streaming-1280")
    expect(reply.locator(".content")).to_contain_text(
        "40.00 refunded for order A-1002", timeout=15_000
    )
    expect(reply.locator(".chat-progress")).to_have_count(0)
    answer = reply.locator(".content").inner_text()
    streamed = [t for t in page.evaluate("window.__streamed") if t]
    assert any(answer.startswith(t.strip()) and t.strip() != answer for t in streamed), streamed
    assert page.evaluate("window.__progress"), "no progress words were shown"

    # What it remembered in that turn: a link to the fact on her privacy page.
    fact = reply.locator(".chat-facts a")
    expect(fact).to_have_text("Prefers to be contacted by email", timeout=10_000)
    expect(fact).to_have_attribute("href", re.compile(r"^/memory/#fact-[0-9a-f-]{36}$"))
    assert page.evaluate("window.__marker") == "same page"  # no reload
    shot(page, "chat-answered-1280")

    # The conversation goes on: the next message is a new run in the same conversation.
    page.get_by_label("Your message").fill("Thank you!")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_label("Your message")).to_have_value("")
    expect(page.get_by_label("Your message")).to_be_focused()
    expect(log.locator(".from-user")).to_have_count(2)
    expect(log.locator(".from-agent").last).to_contain_text(
        "this is the refund desk", timeout=30_000
    )
    first, second = runs_of(acme)
    assert second.session_id == first.session_id
    assert second.input == {"customer": "carol", "message": "Thank you!"}
    assert page.evaluate("window.__marker") == "same page"

    page.set_viewport_size({"width": 375, "height": 800})
    assert no_horizontal_scroll(page)
    shot(page, "chat-375")
    page.set_viewport_size({"width": 1280, "height": 800})
    shot(page, "chat-1280")

    # The link opens her privacy page at that fact.
    href = fact.get_attribute("href")
    fact.click()
    expect(page).to_have_url(console_url + href)
    expect(page.locator(href[href.index("#") :])).to_contain_text(
        "Prefers to be contacted by email"
    )

    # Loaded afresh once both runs have ended, the conversation's page shows the same chat
    # above its details (the reply's last words can arrive before its run is marked done).
    processes.wait_until(
        lambda: all(run.is_finished for run in runs_of(acme)),
        timeout=30,
        what="both runs to end",
    )
    page.goto(conversation_url)
    expect(page.get_by_role("log").locator(".from-agent")).to_have_count(2)
    expect(page.locator("#chat-follow [data-live]")).to_have_count(0)  # nothing left to follow
    shot(page, "chat-conversation-page-1280")
    page.set_viewport_size({"width": 375, "height": 800})
    assert no_horizontal_scroll(page)
    shot(page, "chat-conversation-page-375")


def test_the_start_form_shows_errors_inline_and_fits_a_phone(page, console_url, acme):
    page.set_viewport_size({"width": 375, "height": 800})
    log_in(page, console_url, "carol")
    page.goto(console_url + "/conversations/")
    page.get_by_role("button", name="Send").click()
    error = page.locator("#chat-message-error")
    expect(error).to_have_text("Write a message first.")
    expect(page.get_by_label("Your message")).to_have_attribute("aria-invalid", "true")
    assert no_horizontal_scroll(page)
    shot(page, "chat-start-error-375")
    assert runs_of(acme) == []
