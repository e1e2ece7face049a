"""Live progress in Chromium: the run page and the runs list follow a real worker over the
websocket without reloading, and catch up after the ASGI server restarts mid-run."""

from __future__ import annotations

import re
import sys
import time

import pytest
from playwright.sync_api import expect

from agents.runtime.models import Run, RunEventLog
from tenants.models import Membership, Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# While the server is down, Chromium reports each failed reconnection attempt as a console
# error, and htmx's ws extension logs the socket's error event ("[object Event]"); only the
# restart test expects them. (Fixtures: `web` comes before `page`, so the server outlives it.)
RECONNECT_NOISE = re.compile(
    r"^WebSocket connection to 'ws://[^']+/ws/live/' failed|^\[object Event\]$"
)


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    return tenant


def start_web(port: int | None = None) -> tuple[processes.Proc, str]:
    """uvicorn on the test database, on `port` (a restart keeps the page's URL)."""
    port = port or processes.free_port()
    argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--lifespan", "off", "--no-access-log"]
    proc = processes.Proc(f"live-web-{port}", argv, processes.process_env(DEBUG="1"))
    url = f"http://127.0.0.1:{port}"
    processes.wait_until(lambda: _up(url) or not proc.alive(), timeout=30, what="uvicorn")
    assert proc.alive(), proc.log()[-3000:]
    return proc, url


def _up(url: str) -> bool:
    from urllib.request import urlopen

    try:
        urlopen(url + "/login/", timeout=1)
        return True
    except OSError:
        return False


@pytest.fixture
def web():
    proc, url = start_web()
    yield url
    proc.stop()


def start_worker(console_url: str, delay: str) -> processes.Proc:
    # Payments go to the session's console server, which this module never restarts.
    return processes.start_worker(
        f"live-worker-{delay}",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        DEMO_REFUND_APPROVAL_THRESHOLD="1000",  # no approval: the run goes straight through
        LLM_SCRIPTED_DELAY_SECONDS=delay,
    )


def start_run(page, url: str) -> str:
    page.goto(url + "/runs/")
    page.locator("#id_agent").select_option("refund_desk")
    customer = page.get_by_label("Customer")
    if customer.is_editable():  # a member asks for herself: the field is read-only
        customer.fill("ada@example.com")
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    return page.url.rstrip("/").rsplit("/", 1)[1]


def events_of(run_id: str) -> list[tuple[int, str]]:
    tenant = _tenant_of(run_id)
    with tenant_scope(tenant):
        return list(
            RunEventLog.objects.for_tenant(tenant)
            .filter(run_id=run_id)
            .order_by("seq")
            .values_list("seq", "kind")
        )


def _tenant_of(run_id: str):
    from tenants.scope import system_scope

    with system_scope("test_inspection"):
        return Run.objects.values_list("tenant_id", flat=True).get(pk=run_id)


def shown_ids(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.id)")


def comparable(page, selector: str) -> str:
    """The element's HTML without what legitimately differs between two renders: ticking
    clocks and the server time marker."""
    html = page.eval_on_selector(selector, "e => e.outerHTML")
    html = re.sub(r'(<span class="clock"[^>]*>)[^<]*', r"\1", html)
    html = re.sub(r'data-now="[^"]*"', "", html)
    return re.sub(r">\s+<", "><", html).strip()  # whitespace between elements


def test_a_demo_run_progresses_step_by_step_on_the_run_page_without_a_reload(
    web, page, console_url, acme
):
    worker = start_worker(console_url, delay="3")
    try:
        log_in(page, web, "mia")
        run_id = start_run(page, web)
        page.evaluate("window.__marker = 'same page'")
        summary = page.locator("#run-summary")

        # Step 3 calls the model with the billing history (step 1 asked for it, step 2 looked
        # it up): the page shows the call, then its words as they stream.
        expect(summary).to_contain_text("Calling the model in step 3", timeout=20_000)
        expect(page.locator("#step-2")).to_contain_text("took")
        expect(page.locator("#step-3 .badge")).to_contain_text("Running")
        expect(page.locator("#step-3")).to_contain_text("Running for")
        expect(summary.locator(".step-number")).to_have_text("3")
        progress = summary.locator(".run-progress")
        expect(progress).to_contain_text("of the 2 steps refund_desk defines")
        expect(page.locator(".llm-stream")).to_contain_text("Refund", timeout=10_000)
        screenshot(page, "live-run-mid")

        expect(summary).to_contain_text("Succeeded", timeout=30_000)
        expect(summary).to_contain_text("Finished after 5 steps")
        assert page.evaluate("window.__marker") == "same page"  # pushed, not reloaded
        reply = page.locator(".transcript .msg-assistant").last  # after the tool calls
        expect(reply).to_contain_text("Done: 400.00 refunded")
        expect(page.locator("table.ledger")).to_contain_text("issue_refund")
        assert shown_ids(page, "#timeline > li") == [f"step-{n}" for n in range(1, 6)]
        seqs = [int(i.split("-")[1]) for i in shown_ids(page, "#run-events > li")]
        stored = events_of(run_id)
        assert seqs == [seq for seq, _ in stored] == list(range(1, len(stored) + 1))
        screenshot(page, "live-run-finished")

        # What arrived live is what a fresh load renders.
        live = {s: comparable(page, s) for s in ("#timeline", "#transcript", "#run-events")}
        page.reload()
        for selector, html in live.items():
            assert comparable(page, selector) == html, selector
    finally:
        worker.stop()


def test_the_runs_list_shows_a_new_run_and_its_status_without_a_reload(
    web, page, browser, console_url, acme
):
    log_in(page, web, "mia")
    page.goto(web + "/runs/")
    page.evaluate("window.__marker = 'same page'")
    other = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        second = other.new_page()
        log_in(second, web, "mia")
        run_id = start_run(second, web)  # started in another browser
        row = page.locator(f"#run-row-{run_id}")
        expect(row).to_contain_text("Queued", timeout=10_000)
        counts = page.locator("#run-counts")
        expect(counts.locator("a[href='?status=queued'] .count")).to_have_text("1")
        worker = start_worker(console_url, delay="0.5")
        try:
            expect(row).to_contain_text("Succeeded", timeout=30_000)
        finally:
            worker.stop()
        expect(counts.locator("a[href='?status=succeeded'] .count")).to_have_text("1")
        assert page.evaluate("window.__marker") == "same page"
        assert len(shown_ids(page, "#runs-tbody > tr[id]")) == 1
        screenshot(page, "live-runs-list")
    finally:
        other.close()


@pytest.fixture
def tolerant_page(browser):
    """A page whose only allowed console errors are failed websocket reconnections."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and not m.text.startswith("Failed to load resource")
            and not RECONNECT_NOISE.search(m.text)
            and errors.append(m.text)
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    context.close()
    assert not errors, errors


def test_the_server_restarts_mid_run_and_the_page_catches_up_with_no_gap_and_no_duplicate(
    tolerant_page, console_url, acme
):
    # A member (an end user watching their own run): no approvals badge polling the server.
    factories.make_member(acme, Role.MEMBER, user=factories.make_user("max"))
    page = tolerant_page
    proc, url = start_web()
    port = int(url.rsplit(":", 1)[1])
    worker = start_worker(console_url, delay="6")
    try:
        log_in(page, url, "max")
        run_id = start_run(page, url)
        page.evaluate("window.__marker = 'same page'")
        expect(page.locator("#run-summary")).to_contain_text("Calling the model", timeout=20_000)
        before = shown_ids(page, "#run-events > li")

        proc.stop()  # the server goes away while a step waits for the model
        expect(page.locator(".live-root.live-offline")).to_have_count(1)
        screenshot(page, "live-run-offline")
        processes.wait_until(
            lambda: _status(run_id) == "succeeded",
            timeout=40,
            what="the run to finish while the server is down",
        )
        missed = events_of(run_id)[len(before) :]
        assert missed, "the run must have moved on while the page was disconnected"
        time.sleep(1)
        proc, url = start_web(port)  # same address: the page reconnects on its own

        summary = page.locator("#run-summary")
        expect(summary).to_contain_text("Succeeded", timeout=30_000)
        assert page.evaluate("window.__marker") == "same page"
        stored = events_of(run_id)
        seqs = [int(i.split("-")[1]) for i in shown_ids(page, "#run-events > li")]
        assert seqs == list(range(1, len(stored) + 1)), "a gap or a duplicate"
        assert shown_ids(page, "#timeline > li") == [f"step-{n}" for n in range(1, 6)]
        # The request; two tool calls and their results; the reply.
        assert len(shown_ids(page, "#transcript > li")) == 6
        screenshot(page, "live-run-after-restart")
    finally:
        worker.stop()
        proc.stop()


def _status(run_id: str) -> str:
    from tenants.scope import system_scope

    with system_scope("test_inspection"):
        return Run.objects.values_list("status", flat=True).get(pk=run_id)


def test_a_manager_cancels_from_the_live_page_and_the_waiting_step_goes_away(
    web, page, console_url, acme
):
    worker = processes.start_worker(
        "live-worker-approval", DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds"
    )
    try:
        log_in(page, web, "mia")
        start_run(page, web)  # $400: waits for a manager's approval
        summary = page.locator("#run-summary")
        expect(summary).to_contain_text("Waiting for approval", timeout=20_000)
        # model, tools, model, tools (paused before issue_refund): step 5 waits
        expect(page.locator("#step-5")).to_contain_text("Waiting for approval")
        expect(page.locator("#run-approvals article.approval")).to_contain_text("Pending")
        screenshot(page, "live-run-waiting-approval")
        page.evaluate("window.__marker = 'same page'")
        page.get_by_role("link", name="Cancel run").click()  # asks first, in the page
        question = page.get_by_role("group", name="Cancel this run?")
        expect(question.get_by_role("link", name="Keep it running")).to_be_focused()
        question.get_by_role("button", name="Cancel run").click()
        expect(summary).to_contain_text("Cancelled")
        expect(page.locator("#step-5")).to_have_count(0)  # it never ran
        expect(page.locator("#run-approvals article.approval")).to_contain_text("Cancelled")
        expect(page.locator("#run-events")).to_contain_text("Status changed to cancelled")
        assert page.evaluate("window.__marker") == "same page"
        assert shown_ids(page, "#timeline > li") == ["step-1", "step-2", "step-3", "step-4"]
    finally:
        worker.stop()


@pytest.fixture
def waiting_run(web, page, console_url):
    """mia's $400 refund on the run page, waiting for a manager's approval (a real worker)."""
    worker = processes.start_worker(
        "live-worker-question", DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds"
    )
    try:
        log_in(page, web, "mia")
        run_id = start_run(page, web)
        expect(page.locator("#run-summary")).to_contain_text("Waiting for approval", timeout=20_000)
        yield run_id
    finally:
        worker.stop()


def rerender_summary(page, tenant, run_id: str) -> None:
    """An update that re-renders the summary (the run's status, sent again as the engine
    sends it), and the page showing it."""
    from django.db import transaction

    from agents.live import broadcast
    from agents.runtime import progress

    shown = page.locator("#run-events > li").count()
    page.evaluate("document.getElementById('run-summary').dataset.before = 'update'")
    with tenant_scope(tenant.pk), transaction.atomic():
        progress.publish(
            tenant_id=tenant.pk, run_id=run_id, kind="run.status", status="waiting_approval"
        )
    broadcast.flush()
    expect(page.locator("#run-events > li")).to_have_count(shown + 1, timeout=10_000)
    expect(page.locator("#run-summary[data-before]")).to_have_count(0)  # re-rendered


def test_a_cancel_question_being_answered_survives_a_live_update_and_leaves_when_the_run_ends(
    page, acme, waiting_run
):
    from agents.live import broadcast
    from agents.runtime.services import run_cancel

    page.get_by_role("link", name="Cancel run").click()
    question = page.get_by_role("group", name="Cancel this run?")
    keep = question.get_by_role("link", name="Keep it running")
    expect(keep).to_be_focused()

    # An update re-renders the summary around the question: it stays open, focus and all.
    rerender_summary(page, acme, waiting_run)
    expect(keep).to_be_focused()
    expect(question.get_by_role("button", name="Cancel run")).to_be_visible()

    # Someone else cancels it: the update no longer offers the action, so the question goes.
    with tenant_scope(acme.pk):
        member = Membership.objects.for_tenant(acme).get(user__username="mia")
        mia = factories.principal_for(member)
        run_cancel(principal=mia, run=Run.objects.for_tenant(acme).get(pk=waiting_run))
    broadcast.flush()
    expect(page.locator("#run-summary")).to_contain_text("Cancelled", timeout=10_000)
    expect(question).to_have_count(0)


def test_a_cancel_question_asked_for_just_as_a_live_update_lands_still_opens(
    page, acme, waiting_run
):
    # The question's request is held until an update has re-rendered the summary.
    held = []
    page.route(re.compile(r"/runs/[^/]+/cancel/"), lambda route: held.append(route))
    page.get_by_role("link", name="Cancel run").click()
    page.wait_for_function("document.querySelector('.confirm-trigger.htmx-request')")
    rerender_summary(page, acme, waiting_run)
    assert len(held) == 1
    held[0].continue_()

    question = page.get_by_role("group", name="Cancel this run?")
    expect(question.get_by_role("link", name="Keep it running")).to_be_focused()
    expect(question.get_by_role("button", name="Cancel run")).to_be_visible()
    screenshot(page, "live-run-cancel-question-after-update")
