"""The console's pages: who may see them, what they show, and how actions answer."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.console import selectors
from agents.runtime.models import Checkpoint, Run
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db

WHO = ["admin", "manager", "member", "viewer", "outsider", "anonymous"]


@pytest.fixture
def run(tenant_a):
    return make_run(tenant_a, status="running", lease_owner="w:1", lease_expires_at=ago(5))


def _expect(who: str, *, admin: int, outsider: int) -> int:
    return {"admin": admin, "outsider": outsider, "anonymous": 302}.get(who, 403)


@pytest.mark.parametrize("who", WHO)
def test_only_admins_see_the_runs_console(client_for, run, who):
    response = client_for(who).get("/console/")
    assert response.status_code == _expect(who, admin=200, outsider=200)
    if who == "outsider":  # an admin of another tenant sees their own (no) runs
        assert str(run.pk) not in response.content.decode()


@pytest.mark.parametrize("who", WHO)
def test_only_the_tenants_admins_open_a_run_in_the_console(client_for, run, who):
    response = client_for(who).get(f"/console/runs/{run.pk}/")
    assert response.status_code == _expect(who, admin=200, outsider=404)


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("action", ["resume", "retry", "cancel", "release", "resolve"])
def test_only_the_tenants_admins_act_on_a_run(client_for, run, who, action):
    response = client_for(who).post(
        f"/console/runs/{run.pk}/{action}/", {"version": run.version, "note": ""}
    )
    assert response.status_code == _expect(
        who, admin=302 if action != "retry" else 409, outsider=404
    )


@pytest.mark.parametrize("who", WHO)
def test_only_admins_apply_bulk_actions(client_for, run, who):
    response = client_for(who).post(
        "/console/runs/bulk/", {"action": "resolve", "runs": [f"{run.pk}:{run.version}"]}
    )
    assert response.status_code == _expect(who, admin=302, outsider=302)
    with tenant_scope(run.tenant_id):
        resolved = Run.objects.get(pk=run.pk).resolved_at is not None
    assert resolved == (who == "admin")  # the outsider's bulk finds no such run


def test_the_run_page_says_why_the_run_is_stuck_and_what_to_do(client_for, run):
    page = client_for("admin").get(f"/console/runs/{run.pk}/").content.decode()
    assert "Lease expired, not yet taken back" in page
    assert "its lease expired" in page
    assert "Resume it: another worker continues from the last checkpoint" in page


def test_the_run_page_shows_what_changed_between_consecutive_checkpoints(client_for, tenant_a):
    run = make_run(tenant_a, status="failed", step_seq=1)
    with tenant_scope(tenant_a.pk):
        Checkpoint.objects.create(
            tenant=tenant_a,
            run=run,
            seq=2,
            step="charge",
            next_step="done",
            state={"item": "lamp", "qty": 2, "receipt": {"ok": True}},
            schema_version=1,
        )
    page = client_for("admin").get(f"/console/runs/{run.pk}/").content.decode()
    assert '<code>qty</code>: <span class="before">1</span> → <span class="after">2</span>' in page
    assert '<code>receipt</code>: <span class="after">{&quot;ok&quot;: true}</span>' in page


def test_an_action_on_a_run_that_changed_answers_409_with_the_run_as_it_is_now(client_for, run):
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/resume/", {"version": run.version - 1 or 99}
    )
    assert response.status_code == 409
    page = response.content.decode()
    assert "changed since you loaded this page" in page
    assert f'name="version" value="{run.version}"' in page  # the fresh version to act on


def test_an_htmx_action_answers_with_the_updated_panel(client_for, run):
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/resume/", {"version": run.version}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.startswith('\n<div id="console-run"') or '<div id="console-run"' in page[:200]
    assert "Resumed: the run is queued" in page and "<html" not in page


def test_edited_state_that_fails_the_schema_answers_400_and_saves_nothing(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/state/", {"version": run.version, "state": '{"item": 5}'}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "item: 5 is not of type &#x27;string&#x27;" in page
    assert "{&quot;item&quot;: 5}" in page  # the draft is kept for fixing
    with tenant_scope(tenant_a.pk):
        assert Run.objects.get(pk=run.pk).version == run.version
        assert Checkpoint.objects.get(run=run).state == {"item": "lamp", "qty": 1}


def test_replaying_as_a_new_run_goes_to_the_new_runs_page(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/replay/", {"version": run.version, "seq": 1, "mode": "new"}
    )
    assert response.status_code == 302
    with tenant_scope(tenant_a.pk):
        new = Run.objects.exclude(pk=run.pk).get()
    assert response["Location"] == f"/console/runs/{new.pk}/"


def test_an_unknown_action_is_a_404(client_for, run):
    response = client_for("admin").post(f"/console/runs/{run.pk}/explode/", {"version": 1})
    assert response.status_code == 404


def test_the_console_filters_by_status_agent_stuck_reason_age_and_end_user(
    client_for, members, tenant_a
):
    carol = members["member"].user
    stuck_run = make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    mine = make_run(tenant_a, status="succeeded", created_by=carol)
    other = make_run(tenant_a, status="queued", agent="retired_agent")
    with tenant_scope(tenant_a.pk):
        Run.objects.filter(pk=other.pk).update(created_at=ago(3 * 86400))
    client = client_for("admin")

    def shown(query: str) -> set:
        page = client.get("/console/?" + query, HTTP_HX_REQUEST="true").content.decode()
        return {r.pk for r in (stuck_run, mine, other) if f"console-row-{r.pk}" in page}

    assert shown("status=failed") == {stuck_run.pk}
    assert shown("agent=console_shop") == {stuck_run.pk, mine.pk}
    assert shown("stuck=retries_exhausted") == {stuck_run.pk}
    assert shown("stuck=any") == {stuck_run.pk, other.pk}  # code_missing: retired_agent
    assert shown("age=gt1d") == {other.pk}
    assert shown("age=lt1h") == {stuck_run.pk, mine.pk}
    assert shown(f"user={carol.username}") == {mine.pk}
    assert shown("user=nobody") == set()


def test_a_bad_filter_answers_400(client_for):
    assert client_for("admin").get("/console/?stuck=bogus").status_code == 400
    assert client_for("admin").get("/console/?before=garbage").status_code == 400


def test_the_console_pages_through_runs_by_cursor_without_gaps_or_repeats(tenant_a, members):
    admin = factories.principal_for(members["admin"])
    made = {make_run(tenant_a, status="succeeded", step_seq=0).pk for _ in range(7)}
    seen, cursor = [], None
    with tenant_scope(tenant_a.pk):
        while True:
            page = selectors.runs_page(admin, now=timezone.now(), before=cursor, limit=3)
            seen += [r.pk for r in page.runs]
            if page.next_cursor is None:
                break
            from agents.presenters.forms import parse_cursor

            cursor = parse_cursor(page.next_cursor)
    assert len(seen) == 7 and set(seen) == made


@pytest.mark.parametrize("who", WHO)
def test_only_admins_see_the_console_counts(client_for, run, who):
    response = client_for(who).get("/console/summary/", HTTP_HX_REQUEST="true")
    assert response.status_code == _expect(who, admin=200, outsider=200)
    if who == "outsider":  # counted in their own tenant: no runs
        assert (
            'Lease expired, not yet taken back</span> <strong class="count">0</strong>'
            in response.content.decode()
        )


def test_the_list_loads_without_waiting_for_the_counts_which_follow_it(client_for, run):
    page = client_for("admin").get("/console/").content.decode()
    assert 'hx-get="/console/summary/" hx-trigger="load"' in page
    assert "Counting…" in page and str(run.pk)[:8] in page


def test_the_console_counts_runs_by_status_and_stuck_runs_by_reason(client_for, tenant_a):
    make_run(tenant_a, status="failed", error={"code": "retries_exhausted"})
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(9))
    page = client_for("admin").get("/console/summary/", HTTP_HX_REQUEST="true").content.decode()
    assert page.lstrip().startswith('<div class="grid-2 even" id="console-summary">')
    assert "hx-trigger" not in page
    assert 'Retries used up</span> <strong class="count">1</strong>' in page
    assert 'Lease expired, not yet taken back</span> <strong class="count">1</strong>' in page
    assert 'Failed</span> <strong class="count">1</strong>' in page
