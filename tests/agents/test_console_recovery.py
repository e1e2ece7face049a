"""Recovery you can see: a worker lost and the run recovered automatically, on the run's
timeline, as a badge while it waits, in the console's recovered history (filtered, live),
and admin actions that meet an automatic recovery instead of a conflict.

Runs are lost and recovered the real way: a worker claims with a tiny lease, the recovery
sweep (agents.runtime.sweeps.recover) takes the run back, another worker's claim picks it up.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client

from agents.console import live, recovered
from agents.live import render
from agents.runtime import liveness
from agents.runtime.engine import store
from agents.runtime.engine.runner import drive
from agents.runtime.models import Run, RunEventLog, StepAttempt
from agents.runtime.services import run_start
from agents.runtime.sweeps import recover
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
LOST = "host-a:111"
RESCUER = "host-b:222"
WHO = ["admin", "manager", "member", "viewer", "outsider", "anonymous"]


@pytest.fixture
def start(members, enqueued):
    def make(agent: str = "three_steps") -> Run:
        principal = factories.principal_for(members["admin"])
        with tenant_scope(principal.tenant.pk):
            return run_start(principal=principal, agent=agent, input={})

    return make


def load(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def claim(run: Run, worker: str, lease: float = 60) -> Run:
    assert store.claim(
        tenant_id=str(run.tenant_id), run_id=run.pk, worker=worker, lease_seconds=lease
    )
    return load(run)


def lose(run: Run, worker: str = LOST, ran: float = 0.3) -> Run:
    """`worker` claims the run and dies `ran` seconds into its step, having said it was alive
    just before; the sweep takes it back."""
    claim(run, worker, lease=0.01)
    connection.cursor().execute("SELECT pg_sleep(%s)", [ran])
    liveness.beat([worker])  # its last sign of life
    assert recover()["lost_leases"] == 1
    return load(run)


def lost_and_recovered(start, *, finish: bool = True) -> Run:
    run = lose(start())
    if finish:
        assert drive(tenant_id=str(run.tenant_id), run_id=run.pk, worker=RESCUER).status == (
            "succeeded"
        )
    else:
        claim(run, RESCUER)
    return load(run)


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def admin_principal(members):
    return factories.principal_for(members["admin"])


# --- the run's timeline ---------------------------------------------------------------------------


def test_the_run_page_shows_the_lost_worker_and_the_automatic_recovery_on_the_timeline(
    client_for, start
):
    run = lost_and_recovered(start)
    page = text(client_for("viewer").get(f"/runs/{run.pk}/"))
    lost = re.search(
        rf"Worker <code>{LOST}</code> lost \(last seen alive at "
        r"<time[^>]*>(\d\d:\d\d:\d\d)</time>\) during step 1 "
        r"\(<code>one</code>\), attempt 1 — ran at least (\d+) ms",
        page,
    )
    assert lost, page
    assert int(lost.group(2)) >= 300  # how long it really ran, not 0.0 ms
    assert re.search(
        r"Recovered automatically</span> at <time[^>]*>\d\d:\d\d:\d\d</time> by "
        rf"<code>{RESCUER}</code> — step 1, attempt 2",
        page,
    )
    lost_entry = page[page.index('<li class="attempt-lost">') :]
    assert "0.0 ms" not in lost_entry[: lost_entry.index("</li>")]


def test_lost_at_is_the_last_moment_the_worker_was_seen_alive_not_when_the_sweep_noticed(
    start, tenant_a
):
    from django.utils import timezone

    run = start()
    claim(run, "seen:1", lease=0.01)
    connection.cursor().execute("SELECT pg_sleep(0.2)")
    liveness.beat(["seen:1"])
    last_beat = timezone.now()
    connection.cursor().execute("SELECT pg_sleep(0.5)")  # dead since: the sweep runs later
    assert recover()["lost_leases"] == 1
    run = load(run)
    assert abs((run.lost_at - last_beat).total_seconds()) < 0.1
    with tenant_scope(tenant_a.pk):
        [attempt] = StepAttempt.objects.filter(run=run, outcome="lost")
    assert attempt.ended_at == run.lost_at
    assert 150 <= attempt.duration_ms <= 400  # it ran from its claim to its last beat


def test_the_timeline_never_says_a_lost_attempt_took_zero_milliseconds(client_for, tenant_a):
    run = make_run(tenant_a, status="queued")
    with tenant_scope(tenant_a.pk):
        StepAttempt.objects.create(
            tenant=tenant_a,
            run=run,
            seq=2,
            attempt=1,
            step="charge",
            worker="old:1",
            started_at=ago(10),
            ended_at=ago(9),
            outcome="lost",
            error_code="worker_lost",
        )
    page = text(client_for("admin").get(f"/runs/{run.pk}/"))
    lost_entry = page[page.index('<li class="attempt-lost">') :]
    lost_entry = lost_entry[: lost_entry.index("</li>")]
    assert "last seen alive at" in lost_entry and "how long it ran is not known" in lost_entry
    assert " ms" not in lost_entry


def test_a_run_lost_but_not_yet_picked_up_shows_worker_lost_recovering_not_queued(
    client_for, start
):
    run = lose(start())
    assert (run.status, run.lost_at is not None) == ("queued", True)
    badge = '<span class="badge status-lost">Worker lost — recovering</span>'
    page = text(client_for("admin").get(f"/runs/{run.pk}/"))
    assert f"Status: {badge}" in page
    assert "another worker continues from the last checkpoint" in page
    assert f'<tr id="run-row-{run.pk}"> <td>three_steps</td> <td>{badge}' in text(
        client_for("admin").get("/runs/")
    )
    console = text(client_for("admin").get("/console/", **HX))
    row = console[console.index(f'id="console-row-{run.pk}"') :]
    assert row.index(badge) < row.index("</tr>")
    assert "No action is needed" in text(client_for("admin").get(f"/console/runs/{run.pk}/"))


def test_the_badge_goes_back_to_running_once_another_worker_claims_the_run(client_for, start):
    run = lost_and_recovered(start, finish=False)
    assert run.lost_at is None
    page = text(client_for("admin").get(f"/runs/{run.pk}/"))
    assert 'Status: <span class="badge status-running">Running</span>' in page
    assert "Worker lost — recovering" not in page


def test_once_claimed_again_every_list_says_recovered_automatically(client_for, start):
    run = lost_and_recovered(start, finish=False)
    assert run.recovered_at is not None
    recovered_badge = "Recovered automatically</span>"
    page = text(client_for("admin").get(f"/runs/{run.pk}/"))
    assert 'Status: <span class="badge status-running">Running</span> <span' in page
    assert recovered_badge in page[page.index("Status:") :][:400]
    runs = text(client_for("admin").get("/runs/"))
    row = runs[runs.index(f'<tr id="run-row-{run.pk}">') :]
    assert recovered_badge in row[: row.index("</tr>")]
    console = text(client_for("admin").get("/console/", **HX))
    row = console[console.index(f'id="console-row-{run.pk}"') :]
    assert recovered_badge in row[: row.index("</tr>")]
    fresh = load(start())
    assert fresh.recovered_at is None  # a run never lost says nothing of the kind


def test_the_console_row_says_recovering_from_the_sweep_until_the_claim_then_recovered(
    members, start
):
    principal = admin_principal(members)
    run = start()
    lost = lose(run)
    event = {"tenant_id": str(lost.tenant_id), "run_id": str(run.pk), "kind": "run.lost"}
    row = live.console_feed(principal, event)[0]
    assert f'id="console-row-{run.pk}"' in row
    assert "Worker lost — recovering" in row and "Recovered automatically" not in row
    claim(run, RESCUER)
    event = {**event, "kind": "step.started"}
    row = live.console_feed(principal, event)[0]
    assert "Worker lost — recovering" not in row
    assert "Running" in row and "Recovered automatically" in row


def test_the_run_page_follows_a_lost_worker_live(members, start):
    run = start()
    view = render.RunView(principal=admin_principal(members), run_id=str(run.pk), after=0)
    render.run_catch_up(view)  # the page as loaded
    lost = lose(run)
    [update] = render.run_catch_up(view)
    assert view.after == lost.event_seq
    assert 'id="step-1"' in update and f"Worker <code>{LOST}</code> lost (last seen alive" in update
    assert 'Status: <span class="badge status-lost">Worker lost — recovering</span>' in update
    assert "lost during step 1 one (attempt 1" in update  # the event log's line
    claim(run, RESCUER)
    [update] = render.run_catch_up(view)
    assert "Recovered automatically</span> at" in update
    assert f"Recovered automatically by {RESCUER}: step 1 one (attempt 2)" in update


# --- the console's recovered history --------------------------------------------------------------


def test_the_console_lists_runs_recovered_automatically_with_who_lost_and_who_recovered(
    client_for, start
):
    run = lost_and_recovered(start)
    page = text(client_for("admin").get("/console/"))
    section = page[page.index('id="console-recovered"') : page.index('id="list-heading"')]
    assert f'href="/console/runs/{run.pk}/"' in section
    assert f"<code>{LOST}</code>" in section and f"<code>{RESCUER}</code>" in section
    assert "1 <code>one</code>, attempt 1" in section
    assert "Recovered automatically</span> <time" in section
    assert re.search(r'<td class="num">\d+\.\d s</td>', section)  # how long it waited
    assert '<strong class="count">0</strong> recovering now' in section


def test_a_run_still_waiting_for_a_worker_is_listed_as_recovering(client_for, start):
    lose(start())
    section = text(client_for("admin").get("/console/recovered/?since=hour", **HX))
    assert section.lstrip().startswith('<div id="recovered-list"')
    assert '<strong class="count">1</strong> recovering now' in section
    assert "Worker lost — recovering" in section and "waiting for a worker" in section


def test_an_admins_force_release_is_not_listed_as_recovered_automatically(client_for, tenant_a):
    run = make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(-60))
    client_for("admin").post(f"/console/runs/{run.pk}/release/", {"version": run.version})
    with tenant_scope(tenant_a.pk):
        assert StepAttempt.objects.filter(run=run, outcome="lost").count() == 1
    section = text(client_for("admin").get("/console/recovered/", **HX))
    assert str(run.pk) not in section and "No worker was lost in the last day" in section


def test_the_recovered_history_filters_by_time_and_by_worker_id_or_host(
    client_for, start, tenant_a
):
    recent = lost_and_recovered(start)
    older = lose(start(), worker="host-c:333")
    with tenant_scope(tenant_a.pk):
        StepAttempt.objects.filter(run=older).update(ended_at=ago(2 * 3600))
    client = client_for("admin")

    def shown(query: str) -> set:
        page = client.get(f"/console/recovered/?{query}", **HX).content.decode()
        return {r.pk for r in (recent, older) if f"/console/runs/{r.pk}/" in page}

    assert shown("") == {recent.pk, older.pk}  # the last day
    assert shown("since=day") == {recent.pk, older.pk}
    assert shown("since=hour") == {recent.pk}
    assert shown("worker=host-a") == {recent.pk}  # the host part
    assert shown(f"worker={LOST}") == {recent.pk}  # the worker id
    assert shown("worker=host-c:333&since=day") == {older.pk}
    assert shown("worker=host") == set()  # not a prefix search: host-a is another host
    assert shown("worker=host-c&since=hour") == set()


@pytest.mark.parametrize(
    ("query", "field", "error"),
    [
        ("since=week", "since", "“week” is not a time window. Choose one of: hour, day."),
        ("since=HOUR", "since", "“HOUR” is not a time window. Choose one of: hour, day."),
        ("worker=bad+worker%21", "worker", "“bad worker!” is not a worker: give one like"),
        ("worker=%3Cscript%3E", "worker", "“&lt;script&gt;” is not a worker: give one like"),
        ("worker=" + "h" * 201, "worker", "At most 200 characters (this one has 201)."),
    ],
)
def test_a_bad_recovered_filter_answers_400_with_an_inline_error(client_for, query, field, error):
    client = client_for("admin")
    for response in (
        client.get(f"/console/recovered/?{query}", **HX),
        client.get(f"/console/?{query}"),
    ):
        assert response.status_code == 400
        page = text(response)
        assert f'<span class="error" id="filter-{field}-error">{error}' in page
        assert 'id="recovered-filters-problems" role="alert"' in page
        assert "Select a valid choice" not in page


def test_a_nul_in_a_recovered_filter_is_refused_before_the_view_never_a_500(client_for):
    for query in ("since=%00", "worker=a%00b"):
        assert client_for("admin").get(f"/console/recovered/?{query}", **HX).status_code == 400


@pytest.mark.parametrize("who", WHO)
def test_only_admins_see_the_recovered_history(client_for, start, who):
    run = lost_and_recovered(start)
    response = client_for(who).get("/console/recovered/", **HX)
    expected = {"admin": 200, "outsider": 200, "anonymous": 302}.get(who, 403)
    assert response.status_code == expected
    if who in ("admin", "outsider"):  # the outsider's own tenant lost nothing
        assert (str(run.pk) in response.content.decode()) == (who == "admin")


def test_the_recovered_history_without_htmx_is_the_console_page_showing_it(client_for):
    response = client_for("admin").get("/console/recovered/?since=hour&worker=host-a")
    assert response.status_code == 302
    assert response["Location"] == "/console/?since=hour&worker=host-a"


# --- the console's live feeds ---------------------------------------------------------------------


def event(run: Run, kind: str) -> dict:
    return {"tenant_id": str(run.tenant_id), "run_id": str(run.pk), "kind": kind}


def test_the_console_feeds_are_registered_for_the_live_socket():
    assert render.FEEDS["console"] is live.console_feed
    assert render.FEEDS["console_recovered"] is live.recovered_feed


def test_the_console_feed_sends_the_lost_runs_row_and_the_counts(members, start):
    run = lose(start())
    rows, summary = live.console_feed(admin_principal(members), event(run, "run.lost"), "")
    assert rows.startswith('<tbody hx-swap-oob="afterbegin:#console-tbody">')
    assert f'<tr id="console-row-{run.pk}"' in rows and "Worker lost — recovering" in rows
    assert f'value="{run.pk}:{run.version}:{run.event_seq}"' in rows  # the fresh fence
    assert summary.lstrip().startswith('<div class="grid-2 even" id="console-summary">')
    assert 'Queued</span> <strong class="count">1</strong>' in summary


def test_the_console_feed_sends_no_row_the_page_does_not_show(members, start):
    run = lose(start())
    messages = live.console_feed(admin_principal(members), event(run, "run.lost"), "status=failed")
    assert len(messages) == 1 and 'id="console-summary"' in messages[0]
    assert str(run.pk) not in messages[0]


def test_the_console_feed_on_subscribe_sends_every_row_of_the_page_and_the_counts(members, start):
    runs = [start(), start()]
    rows, summary = live.console_feed(admin_principal(members), None, "agent=three_steps")
    assert all(f'id="console-row-{r.pk}"' in rows for r in runs)
    assert 'id="console-summary"' in summary


def test_on_subscribe_the_console_feed_sends_the_rows_only_if_the_page_is_behind(
    client_for, members, start
):
    run = start()
    principal = admin_principal(members)
    page = client_for("admin").get("/console/", **HX).content.decode()
    shown = re.search(r'id="console-table" data-live="console" data-filter="([^"]*)"', page)
    shown = shown.group(1).replace("&amp;", "&")
    [summary] = live.console_feed(principal, None, shown)  # the rows are as the page shows
    assert 'id="console-summary"' in summary
    lose(run)
    rows, _ = live.console_feed(principal, None, shown)
    assert "Worker lost — recovering" in rows


def test_the_recovered_feed_renders_the_history_when_a_run_of_the_window_was_lost(members, start):
    run = lost_and_recovered(start, finish=False)
    principal = admin_principal(members)
    [html] = live.recovered_feed(principal, event(run, "step.started"), "since=hour")
    assert html.lstrip().startswith('<div id="recovered-list" data-live="console_recovered"')
    assert f"/console/runs/{run.pk}/" in html and f"<code>{RESCUER}</code>" in html
    other = start()
    assert live.recovered_feed(principal, event(other, "step.started"), "since=hour") == []
    # A bad filter is not applied (pages subscribe with what they applied anyway).
    [unfiltered] = live.recovered_feed(principal, event(run, "run.lost"), "worker=bad!")
    assert f"/console/runs/{run.pk}/" in unfiltered
    [on_subscribe] = live.recovered_feed(principal, None, "since=hour")  # no `shown`: sent
    assert f"/console/runs/{run.pk}/" in on_subscribe


def test_on_subscribe_the_recovered_feed_sends_the_history_only_if_the_page_is_behind(
    client_for, members, start
):
    run = lose(start())
    principal = admin_principal(members)
    page = client_for("admin").get("/console/recovered/?since=hour", **HX).content.decode()
    shown = re.search(r'data-filter="([^"]*)"', page).group(1).replace("&amp;", "&")
    assert shown.startswith("since=hour&shown=")
    assert live.recovered_feed(principal, None, shown) == []  # as the page shows it
    claim(run, RESCUER)
    [caught_up] = live.recovered_feed(principal, None, shown)  # e.g. after a reconnect
    assert f"<code>{RESCUER}</code>" in caught_up
    # A bad window is not applied: the history of the default one (the last day) is sent.
    [default] = live.recovered_feed(principal, None, "since=week")
    assert f"<code>{RESCUER}</code>" in default
    assert "taken back automatically in the last day" in default


@pytest.mark.parametrize("role", ["manager", "member", "viewer"])
def test_the_console_feeds_send_nothing_to_anyone_but_admins(members, start, role):
    run = lose(start())
    principal = factories.principal_for(members[role])
    for feed in (live.console_feed, live.recovered_feed):
        assert feed(principal, event(run, "run.lost"), "") == []
        assert feed(principal, None, "") == []


def test_the_console_feed_never_shows_another_tenants_run(outsider, start):
    run = lose(start())
    principal = factories.principal_for(outsider)
    messages = live.console_feed(principal, event(run, "run.lost"), "")
    assert str(run.pk) not in "".join(messages)
    assert live.recovered_feed(principal, event(run, "run.lost"), "") == []


# --- admin actions that meet an automatic recovery -----------------------------------------------


def seen_by_admin(run: Run) -> dict:
    """What the admin's console page posts: the version and the last event it showed."""
    return {"version": run.version, "seen": run.event_seq, "note": ""}


@pytest.fixture
def held(start):
    """A run a worker holds, as an admin's page shows it, before that worker dies."""
    run = claim(start(), LOST, lease=0.01)
    return run, seen_by_admin(run)


def recovered_after_the_page_loaded(run: Run, *, picked_up: bool = True) -> Run:
    connection.cursor().execute("SELECT pg_sleep(0.05)")
    assert recover()["lost_leases"] == 1
    return claim(run, RESCUER) if picked_up else load(run)


@pytest.mark.parametrize("action", ["release", "resume", "resolve", "cancel"])
def test_an_action_on_a_run_recovered_automatically_since_the_page_loaded_needs_nothing(
    client_for, held, action
):
    run, form = held
    fresh = recovered_after_the_page_loaded(run)
    response = client_for("admin").post(f"/console/runs/{run.pk}/{action}/", form, **HX)
    assert response.status_code == 200
    page = text(response)
    assert re.search(
        rf"Already recovered automatically at \d\d:\d\d:\d\d by {RESCUER} — no action needed\.",
        page,
    )
    assert ("Nothing was changed" in page) == (action == "cancel")
    assert f'name="version" value="{fresh.version}"' in page  # the fresh view to act on
    after = load(run)
    assert (after.version, after.status, after.lease_owner) == (fresh.version, "running", RESCUER)
    assert not after.cancel_requested and after.resolved_at is None
    with tenant_scope(run.tenant_id):
        audited = AuditEvent.objects.filter(target_id=str(run.pk), action__contains="console")
        assert not audited.exists()


def test_without_htmx_the_action_redirects_with_the_notice(client_for, held):
    run, form = held
    recovered_after_the_page_loaded(run)
    response = client_for("admin").post(f"/console/runs/{run.pk}/release/", form, follow=True)
    assert response.redirect_chain == [(f"/console/runs/{run.pk}/", 302)]
    assert "Already recovered automatically at" in text(response)


def test_an_action_on_a_run_still_waiting_for_its_recovery_says_it_is_recovering(client_for, held):
    run, form = held
    recovered_after_the_page_loaded(run, picked_up=False)
    response = client_for("admin").post(f"/console/runs/{run.pk}/release/", form, **HX)
    assert response.status_code == 200
    assert f"Already recovering automatically: worker {LOST} was lost (last seen alive at" in text(
        response
    )
    assert load(run).status == "queued"


def test_an_action_on_a_run_that_changed_for_another_reason_still_answers_409(
    client_for, held, members
):
    run, form = held
    recovered_after_the_page_loaded(run)
    other_admin = factories.make_member(run.tenant, "admin")
    client = Client()
    client.force_login(other_admin.user)
    assert (
        client.post(f"/console/runs/{run.pk}/cancel/", seen_by_admin(load(run))).status_code == 302
    )
    response = client_for("admin").post(f"/console/runs/{run.pk}/release/", form, **HX)
    assert response.status_code == 409
    assert "changed since you loaded this page" in text(response)


def test_a_run_that_moved_on_without_losing_its_worker_is_still_a_conflict(client_for, start):
    run = start()
    form = seen_by_admin(run)
    claim(run, RESCUER)
    response = client_for("admin").post(f"/console/runs/{run.pk}/cancel/", form, **HX)
    assert response.status_code == 409


def test_a_recovered_run_that_is_stuck_again_is_a_conflict_not_a_recovery(client_for, held):
    run, form = held
    recovered_after_the_page_loaded(run)
    with tenant_scope(run.tenant_id):
        Run.objects.filter(pk=run.pk).update(lease_expires_at=ago(5))  # its rescuer died too
    response = client_for("admin").post(f"/console/runs/{run.pk}/resume/", form, **HX)
    assert response.status_code == 409


def test_a_page_that_sent_no_event_number_gets_the_conflict_as_before(client_for, held):
    run, form = held
    recovered_after_the_page_loaded(run)
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/release/", {"version": form["version"]}, **HX
    )
    assert response.status_code == 409


def test_a_bulk_action_reports_runs_recovered_automatically_as_needing_nothing(
    client_for, held, tenant_a
):
    run, form = held
    stale = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    recovered_after_the_page_loaded(run)
    response = client_for("admin").post(
        "/console/runs/bulk/",
        {
            "action": "resume",
            "runs": [f"{run.pk}:{form['version']}:{form['seen']}", f"{stale.pk}:99"],
        },
        follow=True,
    )
    page = text(response)
    assert f"Run {run.pk}: Already recovered automatically at" in page
    assert f"Run {stale.pk}: The run changed since you loaded this page" in page


def test_the_console_run_page_posts_the_last_event_it_shows_with_every_action(client_for, held):
    run, _ = held
    page = client_for("admin").get(f"/console/runs/{run.pk}/").content.decode()
    assert page.count(f'name="seen" value="{run.event_seq}"') == page.count('name="version"')


def test_a_recovered_row_pairs_the_lost_worker_with_the_claim_after_it(members, start):
    run = lost_and_recovered(start, finish=False)
    with tenant_scope(run.tenant_id):
        kinds = list(
            RunEventLog.objects.for_tenant(run.tenant_id)
            .filter(run=run)
            .order_by("seq")
            .values_list("kind", flat=True)
        )
    assert kinds[-3:] == ["step.started", "run.lost", "step.started"]
    [row] = recovered.recovered_runs(
        admin_principal(members), now=load(run).updated_at + dt.timedelta(seconds=1)
    )
    assert (row.worker, row.recovered_by, row.step_seq, row.attempt) == (LOST, RESCUER, 1, 1)
    assert row.waited_s is not None and row.waited_s >= 0
