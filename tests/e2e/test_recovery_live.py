"""Recovery seen live by an admin: a worker is killed with SIGKILL mid-step, and without a
reload the admin's pages flag the run as lost ("Worker lost — recovering"), then show it
recovered automatically by another worker, and the run completes.

Real uvicorn, real Celery workers and beat, Chromium. Every worker has a 60 s lease, so only
the liveness key (gone ~3 s after the kill) explains a quick recovery. The recovery sweep
runs inside beat (config/beat.py) and sends the run back to the queue, where it waits,
visibly lost, until the test starts the rescuer.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from agents.demo.models import DemoRefund
from agents.live import consumers
from agents.runtime.models import AgentSession, Run, StepAttempt
from agents.runtime.services import run_start
from config.celery import app as celery_app
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories, processes
from tests.e2e.conftest import BASE_DIR, htmx_settled
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENS = BASE_DIR / "var" / "screens"
LEASE = "60"  # far longer than the test: only liveness can explain a quick recovery


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    carol = factories.make_member(tenant, Role.MEMBER, user=factories.make_user("carol"))
    return tenant, factories.principal_for(carol)


@pytest.fixture
def cluster(console_url):
    """Start the victim, beat and the rescuer on demand; all stopped after."""
    celery_app.control.purge()
    env = {
        "DEMO_PAYMENTS_URL": console_url + "/demo/payments/refunds",
        "DEMO_REFUND_APPROVAL_THRESHOLD": "1000",  # no approval: the run goes straight through
        "AGENTSTATE_LEASE_SECONDS": LEASE,
        "AGENTSTATE_RECOVERY_INTERVAL_SECONDS": "0.5",
    }
    started: list[processes.Proc] = []

    class Cluster:
        def worker(self, name: str, **extra: str) -> processes.Proc:
            started.append(processes.start_worker(name, **{**env, **extra}))
            return started[-1]

        def beat(self) -> None:
            started.append(processes.start_beat("recovery-beat", **env))

    yield Cluster()
    for proc in started:
        proc.stop()


def load(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def start_refund(tenant, customer) -> Run:
    with tenant_scope(tenant.pk):
        session = AgentSession.objects.create(
            tenant=tenant, agent="refund_desk", user=customer.user
        )
        return run_start(
            principal=customer,
            agent="refund_desk",
            session=session,
            input={"customer": "carol", "message": "Please refund $40 for order A-1002"},
        )


def on_victim(cluster, tenant, customer) -> tuple[Run, processes.Proc]:
    """A refund run in its first model call on the victim (which takes 30 s over it)."""
    victim = cluster.worker("e2e-recovery-victim", LLM_SCRIPTED_DELAY_SECONDS="30")
    run = start_refund(tenant, customer)
    processes.wait_until(
        lambda: (r := load(run)).status == "running" and r.lease_owner.endswith(f":{victim.pid}"),
        timeout=30,
        what="the victim to start the first model step",
    )
    return run, victim


def screens(page, name: str, focus: str) -> None:
    """Screenshots at 1280 and 375 px wide (the whole page, and the part the test is about),
    after checking that nothing makes the page scroll sideways."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(200)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, width
        page.screenshot(path=str(SCREENS / f"{name}-{width}.png"), full_page=True)
        page.locator(focus).screenshot(path=str(SCREENS / f"{name}-{width}-detail.png"))
    page.set_viewport_size({"width": 1280, "height": 800})


def test_an_admin_watching_a_run_sees_its_worker_lost_and_then_recovered_automatically(
    page, console_url, acme, cluster
):
    tenant, customer = acme
    log_in(page, console_url, "ada")
    cluster.beat()
    run, victim = on_victim(cluster, tenant, customer)
    page.goto(f"{console_url}/runs/{run.pk}/")
    summary = page.locator("#run-summary")
    step = page.locator("#step-1")
    expect(step).to_contain_text("Running")
    page.evaluate("window.__marker = 'same page'")
    victim.kill9()  # mid-step: SIGKILL, no cleanup
    killed_at = time.monotonic()

    expect(summary).to_contain_text("Worker lost — recovering", timeout=15_000)
    lost_in = time.monotonic() - killed_at
    worker = re.escape(f":{victim.pid}")
    expect(step).to_contain_text(
        re.compile(rf"Worker \S+{worker} lost \(last seen alive at \d\d:\d\d:\d\d\)")
    )
    expect(step).to_contain_text(
        re.compile(r"during step 1 \(model\), attempt 1 — (ran at least \d|how long it ran is not)")
    )
    expect(step.locator(".recovery.pending")).to_contain_text("Recovering: queued again since")
    assert lost_in < 12, f"flagged as lost {lost_in:.1f}s after the kill"
    screens(page, "run-lost-recovering", "#timeline")

    rescuer = cluster.worker("e2e-recovery-rescuer")
    recovered = step.locator(".recovery:not(.pending)")
    expect(recovered).to_contain_text(
        re.compile(rf"Recovered automatically at \d\d:\d\d:\d\d by \S+:{rescuer.pid} — step 1"),
        timeout=20_000,
    )
    expect(summary).to_contain_text("Succeeded", timeout=30_000)
    expect(page.locator("#run-events")).to_contain_text("Recovered automatically by")
    assert page.evaluate("window.__marker") == "same page"  # pushed, never reloaded
    screens(page, "run-recovered-timeline", "#timeline")

    done = load(run)
    assert done.status == "succeeded", done.error
    assert DemoRefund.objects.filter(idempotency_key__startswith=str(run.pk)).count() == 1


def _console_feeds_subscribable() -> None:
    """The consumer accepts the console's feeds (registered in agents/live/hooks.py) only
    once it subscribes to every registered tenant feed, not a fixed list of kinds."""
    try:
        consumers._parse('{"type": "subscribe", "kind": "console", "filter": ""}', None)
    except consumers.Malformed:
        pytest.fail(
            "agents/live/consumers.py refuses the 'console' feed: it must accept every kind "
            "in agents.live.render.FEEDS (see the change asked for with this test)"
        )


def test_an_admin_watching_the_console_sees_a_lost_worker_flagged_then_recovered(
    page, console_url, acme, cluster
):
    _console_feeds_subscribable()
    tenant, customer = acme
    log_in(page, console_url, "ada")
    cluster.beat()
    run, victim = on_victim(cluster, tenant, customer)
    page.goto(f"{console_url}/console/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs console")
    row = page.locator(f"#console-row-{run.pk}")
    history = page.locator("#recovered-list")
    expect(row).to_contain_text("Running")
    expect(history).to_contain_text("No worker was lost in the last day")
    page.evaluate("window.__marker = 'same page'")
    victim.kill9()  # mid-step: SIGKILL, no cleanup

    expect(row).to_contain_text("Worker lost — recovering", timeout=15_000)
    lost = history.locator("tr.recovering")
    expect(lost).to_contain_text(f":{victim.pid}")
    expect(lost).to_contain_text("waiting for a worker")
    expect(history).to_contain_text("1 recovering now")
    screens(page, "console-lost-recovering", "#console-recovered")

    rescuer = cluster.worker("e2e-recovery-rescuer")
    recovered = history.locator("tbody tr[id]").first
    expect(recovered).to_contain_text("Recovered", timeout=20_000)
    expect(recovered).to_contain_text(f":{rescuer.pid}")
    expect(recovered).to_contain_text(f":{victim.pid}")
    expect(row).to_contain_text("Succeeded", timeout=30_000)
    expect(row).to_contain_text("Recovered automatically")  # after "Worker lost — recovering"
    expect(history).to_contain_text("0 recovering now")
    assert page.evaluate("window.__marker") == "same page"  # pushed, never reloaded

    # The filters, by keyboard: the worker's host narrows the history, a bad value is
    # answered inline.
    host = load_lost_worker(run).rsplit(":", 1)[0]
    page.get_by_label("Lost worker").fill(host)
    page.keyboard.press("Enter")
    counts = history.locator(".recovered-counts")
    expect(counts).to_contain_text(f"taken back automatically in the last day by {host}")
    expect(history.locator("tbody tr[id]")).to_have_count(1)
    htmx_settled(page)  # each answer swaps the form in again: act on the settled one
    page.get_by_label("Lost worker").fill("not a worker!")
    page.keyboard.press("Enter")
    expect(page.locator("#console-recovered").get_by_role("alert").first).to_contain_text(
        "is not a worker: give one like host:1234"
    )
    htmx_settled(page)
    page.get_by_label("Lost worker").fill("")
    page.keyboard.press("Shift+Tab")  # back to the time window, by keyboard
    expect(page.get_by_label("When lost")).to_be_focused()
    # Leaving the emptied field is a change too: its answer swaps the form back in.
    expect(page.locator("#recovered-filters-problems")).to_have_count(0)
    htmx_settled(page)
    page.get_by_label("When lost").select_option("hour")  # from the last day to the last hour
    expect(counts).to_contain_text("taken back automatically in the last hour")
    expect(history.locator("tbody tr[id]")).to_have_count(1)
    screens(page, "console-recovered-history", "#console-recovered")

    done = load(run)
    assert done.status == "succeeded", done.error


def load_lost_worker(run: Run) -> str:
    with tenant_scope(run.tenant_id):
        return StepAttempt.objects.get(run=run, outcome="lost").worker
