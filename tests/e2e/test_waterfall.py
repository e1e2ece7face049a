"""Pictures where they beat text, in Chromium: the run page's waterfall shows the time a demo
refund waited for a manager (a real worker runs it, a manager approves on the page), and the
runs list, the run page, the console and the inbox fit a desktop and a phone with their charts.

Screenshots: var/screens/pictures-<page>-<width>.png.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from agents.runtime.models import Checkpoint, Run
from approvals.models import ApprovalRequest
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.test_approvals import run_status, start_refund
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / "var" / "screens"
WIDTHS = (1280, 375)


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mia"))
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant


@pytest.fixture
def worker(console_url):
    proc = processes.start_worker(
        "e2e-waterfall-worker",
        DEMO_PAYMENTS_URL=console_url + "/demo/payments/refunds",
        AGENTSTATE_CONSOLE_URL=console_url,
    )
    yield proc
    proc.stop()


def shoot(page, name: str, *, tables_fit: bool = True) -> None:
    """A full-page screenshot at each width, checking that nothing runs off the side (nor,
    with `tables_fit`, inside a table's scroll box)."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)
        page.screenshot(path=str(SCREENS / f"pictures-{name}-{width}.png"), full_page=True)
        sideways = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert sideways <= 0, f"{name} scrolls sideways by {sideways}px at {width}px"
        boxes = page.evaluate(
            "[...document.querySelectorAll('.table-scroll')]"
            ".map(e => e.scrollWidth - e.clientWidth)"
        )
        assert not tables_fit or max(boxes, default=0) <= 0, f"{name}: a table scrolls {boxes}"
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_run_that_waited_for_a_manager_shows_the_wait_in_its_waterfall(
    page, console_url, acme, worker
):
    run = start_refund(acme, "carol")  # $400: above the threshold, so it waits for a manager
    processes.wait_until(
        lambda: run_status(run) == "waiting_approval", timeout=30, what="the run to pause"
    )
    log_in(page, console_url, "mia")
    page.goto(f"{console_url}/runs/{run.pk}/")
    section = page.locator("#run-waterfall")
    chart = section.get_by_role("img", name="Steps, waits and approvals on one time axis")
    expect(chart).to_be_visible()
    waiting = section.locator('g[data-series="approval"]')
    expect(waiting).to_have_count(1)
    expect(waiting).to_have_class(re.compile("ongoing"))  # still waiting: it ends "now"
    page.wait_for_timeout(2000)  # the manager takes their time

    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#run-summary")).to_contain_text("Succeeded", timeout=30_000)
    # The section follows the run live: the wait has ended, the steps after it are drawn.
    expect(waiting).not_to_have_class(re.compile("ongoing"), timeout=10_000)
    expect(section.locator(".time-totals")).to_contain_text("Waiting for approval")
    waited_ms = float(waiting.get_attribute("data-value"))
    assert waited_ms >= 2000
    spans = section.locator("g.span")
    kinds = [spans.nth(i).get_attribute("data-series") for i in range(spans.count())]
    starts = [float(spans.nth(i).get_attribute("data-start")) for i in range(spans.count())]
    assert starts == sorted(starts)  # one time axis, in order
    wait_at = kinds.index("approval")
    assert "step" in kinds[:wait_at] and "step" in kinds[wait_at + 1 :]  # before and after
    steps_ms = sum(
        float(spans.nth(i).get_attribute("data-value")) for i, k in enumerate(kinds) if k == "step"
    )
    assert steps_ms < waited_ms  # where the time went: waiting, not working
    expect(section.get_by_text("The numbers as a table")).to_be_visible()
    shoot(page, "run", tables_fit=False)  # the ledger's keys may scroll in their own box


def history(tenant) -> None:
    """A day of refund desk runs, their steps, and pending requests of several ages."""
    now = timezone.now()
    asks = [
        ("Please refund $40 for order A-1002", "Done: 40.00 refunded for order A-1002."),
        ("Refund $400 for A-1001, charged twice", "Done: 400.00 refunded for order A-1001."),
        ("Refund $12 for A-1003", "I can't refund 12.00 for A-1003: it doesn't match."),
        ("Where is my desk?", "It ships on Monday."),
    ]
    statuses = ["succeeded"] * 6 + ["failed", "cancelled", "waiting_approval", "running"]
    with tenant_scope(tenant.pk):
        for i in range(48):
            status = statuses[i % len(statuses)]
            message, answer = asks[i % len(asks)]
            created = now - dt.timedelta(minutes=29 * i + 3)
            finished = status in ("succeeded", "failed", "cancelled")
            run = Run.objects.create(
                tenant=tenant,
                agent="refund_desk",
                agent_version=2,
                status=status,
                current_step="model",
                step_seq=3,
                input={"message": message, "customer": f"c{i}@example.com"},
                output={"answer": answer, "turns": 3} if status == "succeeded" else None,
                error={"code": "retries_exhausted"} if status == "failed" else None,
                attempts=3 if status == "failed" else 1,
            )
            Run.objects.for_tenant(tenant).filter(pk=run.pk).update(
                created_at=created,
                started_at=created + dt.timedelta(seconds=1),
                finished_at=created + dt.timedelta(seconds=4 + i % 7) if finished else None,
            )
            for seq in (1, 2, 3):
                Checkpoint.objects.create(
                    tenant=tenant,
                    run=run,
                    seq=seq,
                    step="model" if seq != 2 else "tools",
                    state={},
                    schema_version=1,
                    attempt=1,
                    started_at=created + dt.timedelta(seconds=seq),
                    duration_ms=20 + (i * 37 + seq * 11) % 180,
                )
            if status == "waiting_approval":
                request = ApprovalRequest.objects.create(
                    tenant=tenant,
                    run=run,
                    checkpoint_seq=3,
                    step="tools",
                    action="issue_refund",
                    arguments={
                        "customer": f"c{i}@example.com",
                        "order": "A-1001",
                        "amount": "400.00",
                    },
                    amount="400.00",
                    reason="Refund 400.00 USD for order A-1001: duplicate charge.",
                )
                ApprovalRequest.objects.for_tenant(tenant).filter(pk=request.pk).update(
                    requested_at=created + dt.timedelta(seconds=3),
                    due_at=now - dt.timedelta(hours=1) if i > 30 else now + dt.timedelta(hours=8),
                )


def test_the_pictures_fit_a_desktop_and_a_phone(page, console_url, acme):
    history(acme)
    log_in(page, console_url, "ada")

    page.goto(console_url + "/runs/")
    charts = page.locator("#runs-charts")
    expect(charts.get_by_role("img", name=re.compile("^Runs created per hour"))).to_be_visible()
    expect(charts.get_by_role("img", name=re.compile("^Step time per hour"))).to_be_visible()
    newest = page.locator("#runs-tbody tr[id]").first
    expect(newest).to_contain_text("Asked: refund 40.00 for A-1002")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_url)
    first = page.locator("#runs-tbody tr[id]").first
    run_id = first.get_attribute("id").removeprefix("run-row-")
    expect(first.locator("code.run-id")).to_have_text(run_id)  # the whole id, not 8 characters
    expect(first.get_by_role("button", name="Copy the run id")).to_be_visible()
    copy = first.locator("button.copy")
    for attempt in range(3):  # the live socket may swap the rows in again as it is pressed
        copy.click()
        try:
            expect(copy).to_have_text("Copied", timeout=1500)
            break
        except AssertionError:
            if attempt == 2:
                raise
    assert page.evaluate("navigator.clipboard.readText()") == run_id
    shoot(page, "runs")
    charts.get_by_role("link", name="7d").click()
    expect(charts.get_by_role("img", name=re.compile("^Runs created per day"))).to_be_visible()

    page.goto(console_url + "/console/")
    charts = page.locator("#console-charts")
    expect(charts.get_by_role("img", name=re.compile("^Runs created per hour"))).to_be_visible()
    expect(page.locator("#console-summary")).not_to_contain_text("Counting")
    shoot(page, "console")

    page.goto(console_url + "/approvals/")
    chart = page.get_by_role("img", name="Pending requests by how long they have waited")
    expect(chart).to_be_visible()
    expect(page.locator("table.inbox tbody tr").first).to_contain_text("USD")
    shoot(page, "inbox")
