"""The console's run pages: runs list, run page, start, cancel, approve, agent registry.

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from agents.presenters.pages import SOMETHING_WENT_WRONG
from agents.runtime.engine.runner import drive
from agents.runtime.models import AgentSession, Checkpoint, Message, Run
from agents.runtime.services import run_start
from approvals.models import ApprovalRequest
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
DEMO_MESSAGE = "Please refund $400 for order A-1001, I was charged twice"


@pytest.fixture
def start_as(members, outsider, tenant_a, enqueued):
    """Start a run through the service as a role (or a membership), in its own tenant."""

    def make(who="admin", agent="three_steps", **run_input) -> Run:
        membership = (
            who if not isinstance(who, str) else (outsider if who == "outsider" else members[who])
        )
        principal = factories.principal_for(membership)
        with tenant_scope(principal.tenant.pk):
            return run_start(principal=principal, agent=agent, input=run_input)

    return make


def step(run: Run, worker: str = "w1"):
    return drive(tenant_id=str(run.tenant_id), run_id=run.pk, worker=worker)


def rows(model, tenant, **filters) -> list:
    with tenant_scope(tenant.pk):
        return list(model.objects.for_tenant(tenant).filter(**filters).order_by("pk"))


def page_text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def pending(start_as, tenant_a):
    """A run of the test agent `pauses`, waiting for a decision, and its approval request."""
    run = start_as("admin", agent="pauses", kind="approval")
    assert step(run).status == "waiting_approval"
    [request] = rows(ApprovalRequest, tenant_a, run=run)
    return run, request


# --- reading: the role matrix ---------------------------------------------------------------------


@pytest.mark.parametrize("who", ["admin", "manager", "viewer", "member"])
def test_every_role_of_the_tenant_reads_the_runs_list_and_the_registry(client_for, who):
    client = client_for(who)
    assert client.get("/runs/").status_code == 200
    assert client.get("/agents/").status_code == 200


@pytest.mark.parametrize("who", ["admin", "manager", "viewer"])
def test_admins_managers_and_viewers_read_any_run_of_the_tenant(client_for, start_as, who):
    run = start_as("member")
    response = client_for(who).get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    assert str(run.pk) in response.content.decode()


def test_a_member_reads_their_own_run_but_gets_404_for_another_members(
    client_for, start_as, tenant_a
):
    own = start_as("member")
    neighbour = factories.make_member(tenant_a, "member")
    theirs = start_as(neighbour)
    by_admin = start_as("admin")
    client = client_for("member")
    assert client.get(f"/runs/{own.pk}/").status_code == 200
    assert client.get(f"/runs/{theirs.pk}/").status_code == 404
    assert client.get(f"/runs/{by_admin.pk}/").status_code == 404


def test_a_member_lists_only_their_own_runs(client_for, start_as, tenant_a):
    own = start_as("member")
    theirs = start_as(factories.make_member(tenant_a, "member"))
    page = client_for("member").get("/runs/").content.decode()
    assert str(own.pk) in page
    assert str(theirs.pk) not in page
    assert "Your runs" in page


def test_a_member_also_sees_runs_of_their_own_conversations(client_for, members, tenant_a):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(tenant_a.pk):
        session = AgentSession.objects.create(
            tenant=tenant_a, agent="three_steps", user=members["member"].user
        )
        run = run_start(principal=admin, agent="three_steps", input={}, session=session)
    assert client_for("member").get(f"/runs/{run.pk}/").status_code == 200


def test_the_outsider_gets_404_for_run_pages_and_lists_none_of_tenant_a(client_for, start_as):
    runs = [start_as(role) for role in ("admin", "manager", "member")]
    client = client_for("outsider")
    for run in runs:
        assert client.get(f"/runs/{run.pk}/").status_code == 404
    page = client.get("/runs/").content.decode()
    assert not any(str(run.pk) in page for run in runs)
    assert "No runs match" in page


def test_an_unknown_run_id_is_404(client_for):
    assert client_for("admin").get("/runs/00000000-0000-0000-0000-000000000000/").status_code == 404


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", "/runs/"),
        ("get", "/agents/"),
        ("get", "/runs/{run}/"),
        ("post", "/runs/start/"),
        ("post", "/runs/{run}/cancel/"),
        ("post", "/runs/{run}/approvals/{approval}/decide/"),
    ],
)
def test_anonymous_visitors_are_sent_to_login(client_for, pending, method, url):
    run, request = pending
    response = getattr(client_for("anonymous"), method)(url.format(run=run.pk, approval=request.pk))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


# --- starting a run -------------------------------------------------------------------------------


def start_form(**overrides) -> dict:
    return {
        "agent": "refund_desk",
        "customer": "ada@example.com",
        "message": DEMO_MESSAGE,
    } | overrides


@pytest.mark.parametrize("who", ["admin", "manager", "member"])
def test_writers_start_a_run_and_land_on_its_page(client_for, enqueued, members, tenant_a, who):
    response = client_for(who).post("/runs/start/", start_form())
    assert response.status_code == 302
    [run] = rows(Run, tenant_a)
    assert response["Location"] == f"/runs/{run.pk}/"
    assert (run.agent, run.status, run.created_by) == ("refund_desk", "queued", members[who].user)
    # A member asks for themselves whatever the form says (tests/agents/test_chat.py).
    customer = members[who].user.username if who == "member" else "ada@example.com"
    assert run.input == {"customer": customer, "message": DEMO_MESSAGE}
    [session] = rows(AgentSession, tenant_a)
    assert run.session_id == session.pk and session.user == members[who].user
    [message] = rows(Message, tenant_a)
    assert (message.role, message.content, message.run_id) == ("user", DEMO_MESSAGE, run.pk)


def test_a_viewer_may_not_start_a_run_and_does_not_see_the_form(client_for, enqueued, tenant_a):
    client = client_for("viewer")
    assert client.post("/runs/start/", start_form()).status_code == 403
    assert rows(Run, tenant_a) == []
    page = client.get("/runs/").content.decode()
    assert "Start a run" not in page and 'action="/runs/start/"' not in page


def test_writers_see_the_start_form_with_the_demo_message(client_for):
    page = client_for("member").get("/runs/").content.decode()
    assert "Start a run" in page
    assert DEMO_MESSAGE in page
    assert '<option value="refund_desk"' in page


def test_the_outsider_starts_runs_only_in_their_own_tenant(
    client_for, enqueued, tenant_a, tenant_b
):
    assert client_for("outsider").post("/runs/start/", start_form()).status_code == 302
    assert rows(Run, tenant_a) == []
    assert len(rows(Run, tenant_b)) == 1


def test_starting_with_htmx_answers_with_a_client_redirect(client_for, enqueued, tenant_a):
    response = client_for("manager").post("/runs/start/", start_form(), **HX)
    [run] = rows(Run, tenant_a)
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/runs/{run.pk}/"


@pytest.mark.parametrize(
    "data,field,error",
    [
        (start_form(agent="no_such_agent"), "agent", "There is no agent with that name."),
        (start_form(message=""), "message", "This field is required."),
        (start_form(message="   "), "message", "This field is required."),
        (start_form(message="x" * 2001), "message", "at most 2000 characters"),
        (start_form(customer=""), "customer", "This field is required."),
    ],
    ids=["unknown-agent", "empty-message", "blank-message", "long-message", "no-customer"],
)
def test_bad_input_shows_the_form_again_with_400_and_writes_nothing(
    client_for, enqueued, tenant_a, data, field, error
):
    for headers in ({}, HX):
        response = client_for("manager").post("/runs/start/", data, **headers)
        assert response.status_code == 400
        text = page_text(response)
        assert f'id="{field}-error"' in text and error in text
        assert ("<html" in text) is (not headers)  # htmx gets the form partial only
    assert rows(Run, tenant_a) == [] and rows(AgentSession, tenant_a) == []
    assert rows(Message, tenant_a) == [] and enqueued == []


def test_a_message_of_exactly_2000_characters_is_accepted(client_for, enqueued, tenant_a):
    response = client_for("member").post("/runs/start/", start_form(message="$1 " + "x" * 1997))
    assert response.status_code == 302
    assert len(rows(Run, tenant_a)) == 1


def test_start_accepts_only_post(client_for):
    assert client_for("admin").get("/runs/start/").status_code == 405


# --- the list: filters, counts, pages -------------------------------------------------------------


def make_runs(tenant, n: int, *, created_at=None, **fields) -> list[Run]:
    with tenant_scope(tenant.pk):
        made = Run.objects.bulk_create(
            Run(
                tenant=tenant,
                agent=fields.get("agent", "three_steps"),
                agent_version=1,
                current_step="one",
                status=fields.get("status", "queued"),
            )
            for _ in range(n)
        )
        if created_at is not None:
            Run.objects.for_tenant(tenant).filter(pk__in=[r.pk for r in made]).update(
                created_at=created_at
            )
    return made


def run_ids(html: str) -> list[str]:
    return re.findall(r'href="/runs/([0-9a-f-]{36})/"', html)


def older_link(html: str) -> str | None:
    match = re.search(r'<a href="(/runs/\?[^"]*)"[^>]*>Older</a>', html)
    return match and match.group(1).replace("&amp;", "&")


def test_the_list_pages_50_at_a_time_newest_first_without_gaps_or_repeats(client_for, tenant_a):
    # Half the runs share one timestamp: the id breaks the tie, so nothing is skipped.
    same = make_runs(tenant_a, 30, created_at=timezone.now() - dt.timedelta(hours=1))
    spread = make_runs(tenant_a, 45)
    client = client_for("viewer")
    first = client.get("/runs/").content.decode()
    page1 = run_ids(first)
    assert len(page1) == 50
    assert page1[:45] == [str(r.pk) for r in reversed(spread)]  # newest first
    url = older_link(first)
    assert url and "before=" in url
    second = client.get(url).content.decode()
    page2 = run_ids(second)
    assert len(page2) == 25 and older_link(second) is None
    assert set(page1).isdisjoint(page2)
    assert set(page1) | set(page2) == {str(r.pk) for r in same + spread}
    assert 'href="/runs/?"' in second or ">Newest<" in second


def test_filters_narrow_the_list_and_keep_themselves_on_the_older_link(client_for, tenant_a):
    failed = make_runs(tenant_a, 51, status="failed", agent="flaky")
    make_runs(tenant_a, 3, status="succeeded", agent="flaky")
    make_runs(tenant_a, 2, status="failed", agent="three_steps")
    client = client_for("admin")
    html = client.get("/runs/?status=failed&agent=flaky").content.decode()
    assert len(run_ids(html)) == 50
    query = parse_qs(urlsplit(older_link(html)).query)
    assert query["status"] == ["failed"] and query["agent"] == ["flaky"]
    rest = run_ids(client.get(older_link(html)).content.decode())
    assert rest == [str(failed[0].pk)]
    assert len(run_ids(client.get("/runs/?status=succeeded").content.decode())) == 3
    assert len(run_ids(client.get("/runs/?agent=three_steps").content.decode())) == 2


def test_the_status_counts_cover_every_run_the_reader_may_see(client_for, tenant_a, start_as):
    make_runs(tenant_a, 4, status="failed")
    make_runs(tenant_a, 2, status="succeeded")
    start_as("member")
    admin = page_text(client_for("admin").get("/runs/"))
    assert re.search(r"Failed</span> <strong class=\"count\">4<", admin)
    assert re.search(r"Succeeded</span> <strong class=\"count\">2<", admin)
    assert re.search(r"Queued</span> <strong class=\"count\">1<", admin)
    member = page_text(client_for("member").get("/runs/"))
    assert re.search(r"Failed</span> <strong class=\"count\">0<", member)
    assert re.search(r"Queued</span> <strong class=\"count\">1<", member)


def test_an_htmx_filter_gets_only_the_table_and_the_response_varies_on_hx_request(
    client_for, tenant_a
):
    make_runs(tenant_a, 2, status="failed")
    response = client_for("admin").get("/runs/?status=failed", **HX)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="runs-table"') and "<html" not in html
    assert len(run_ids(html)) == 2
    assert "HX-Request" in response["Vary"]
    restore = client_for("admin").get(
        "/runs/?status=failed", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX
    )
    assert "<html" in restore.content.decode()  # a history restore needs the whole page


@pytest.mark.parametrize(
    "query", ["status=exploded", "agent=nobody", "before=yesterday", "before=2024-01-01T00:00:00|x"]
)
def test_a_bad_filter_or_cursor_is_400_said_and_not_applied(client_for, tenant_a, query):
    made = make_runs(tenant_a, 1)
    response = client_for("admin").get(f"/runs/?{query}")
    assert response.status_code == 400
    assert run_ids(response.content.decode()) == [str(r.pk) for r in made]
    assert 'class="filter-problems" id="runs-filters-problems" role="alert"' in page_text(response)


# --- the list: what each row says -----------------------------------------------------------------


def row_of(html: str, run: Run) -> str:
    start = html.index(f'<tr id="run-row-{run.pk}">')
    return html[start : html.index("</tr>", start)]


def set_fields(run: Run, **fields) -> Run:
    with tenant_scope(run.tenant_id):
        Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(**fields)
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def test_a_row_says_what_the_run_was_how_it_ended_how_long_it_took_when_and_its_full_id(
    client_for, start_as
):
    run = start_as("admin", agent="refund_desk", message="Please refund $40 for order A-1002")
    began = timezone.now() - dt.timedelta(minutes=3)
    set_fields(
        run,
        status="succeeded",
        created_at=began - dt.timedelta(seconds=2),
        started_at=began,
        finished_at=began + dt.timedelta(seconds=29),
        output={"answer": "Done: 40.00 refunded for order A-1002 (refund re_1).", "turns": 3},
        attempts=1,
    )
    row = page_text(client_for("viewer").get("/runs/")).split("<tbody")[1]
    row = row_of(row, run)
    # what was asked, as the link
    assert f'<a href="/runs/{run.pk}/">Asked: refund 40.00 for A-1002</a>' in row
    assert '<td class="outcome">refunded</td>' in row
    assert "29 s" in row  # started → finished
    assert re.search(r'<time datetime="[^"]+" title="[^"]+">3 min ago</time>', row)
    assert f'<code id="id-{run.pk}" class="run-id">{run.pk}</code>' in row  # the whole id
    assert f'data-copy="{run.pk}"' in row and 'aria-describedby="id-' in row
    assert "attempts" not in row  # one attempt: nothing to say


def test_a_row_shows_attempts_only_when_there_were_more_than_one(client_for, start_as):
    once, retried = start_as("admin"), start_as("admin")
    set_fields(once, attempts=1)
    set_fields(retried, attempts=3, status="running", started_at=timezone.now())
    html = page_text(client_for("admin").get("/runs/"))
    assert "attempts" not in row_of(html, once)
    assert "· 3 attempts" in row_of(html, retried)


def test_an_unfinished_row_says_how_long_it_has_been_going_and_a_failed_one_its_error(
    client_for, start_as
):
    waiting = start_as("admin")
    since = timezone.now() - dt.timedelta(minutes=2)
    set_fields(waiting, status="waiting_approval", started_at=since)
    failed = start_as("admin")
    set_fields(failed, status="failed", finished_at=timezone.now(), error={"code": "no_money"})
    never = start_as("admin")  # cancelled in the queue: it took nothing, and is not "running"
    set_fields(never, status="cancelled", finished_at=timezone.now())
    html = page_text(client_for("admin").get("/runs/"))
    assert '<td class="num took"><span class="muted">—</span></td>' in row_of(html, never)
    row = row_of(html, waiting)
    assert 'waiting for</span> <span class="clock" data-since=' in row and "2 min 0" in row
    assert '<td class="outcome">error: no_money</td>' in row_of(html, failed)


def test_a_row_kept_from_an_earlier_request_shows_the_run_as_it_is_now_and_to_whom(
    client_for, start_as, members
):
    """Rows are kept between requests (core/fragments.py) under what they show: a change by
    any path, even one that leaves the run's version alone, and the words for end users
    against staff, each give the row anew."""
    run = start_as("member", message="Please refund $40 for order A-1002")
    staff = client_for("admin")
    assert "status-queued" in row_of(page_text(staff.get("/runs/")), run)
    set_fields(run, status="failed", finished_at=timezone.now(), error={"code": "no_money"})
    row = row_of(page_text(staff.get("/runs/")), run)
    assert "status-failed" in row and '<td class="outcome">error: no_money</td>' in row
    row = row_of(page_text(client_for("member").get("/runs/")), run)
    assert "status-failed" in row and "no_money" not in row
    assert f'<td class="outcome">{SOMETHING_WENT_WRONG}</td>' in row
    assert "no_money" in row_of(page_text(staff.get("/runs/")), run)


def test_the_runs_status_strip_keeps_its_links_but_quiets_statuses_with_no_runs(
    client_for, start_as
):
    start_as("admin")
    html = page_text(client_for("admin").get("/runs/"))
    assert '<li><a href="?status=queued">' in html
    assert '<li class="zero"><a href="?status=failed">' in html


# --- the run page ---------------------------------------------------------------------------------


def test_the_run_page_shows_steps_attempts_with_traceback_state_and_error(client_for, start_as):
    run = start_as("admin", agent="flaky", mode="bug")
    assert step(run).status == "failed"
    html = page_text(client_for("viewer").get(f"/runs/{run.pk}/"))
    assert "Step 1: <code>start</code>" in html and "Step 2: <code>wobble</code>" in html
    assert "No checkpoint yet." in html  # the failed step wrote none
    assert "builtins.KeyError" in html and "step_raised" in html
    assert "<summary>Traceback</summary>" in html and "Traceback (most recent call last)" in html
    assert "&quot;started&quot;: true" in html  # the latest checkpoint's state, pretty
    assert "Error <code>step_raised</code>" in html
    assert 'class="badge status-failed">Failed<' in html
    assert "hx-trigger" not in html  # finished: no polling


def test_the_run_page_shows_retries_and_the_ledger(client_for, start_as):
    from django.db import connection

    run = start_as("admin", agent="effects", crash_after_tools=True)
    assert step(run).reason == "retrying"
    connection.cursor().execute("SELECT pg_sleep(0.6)")
    assert step(run).status == "succeeded"
    html = page_text(client_for("manager").get(f"/runs/{run.pk}/"))
    assert "Failed, will retry" in html and "llm_rate_limited" in html
    assert html.count("<code>count_effect</code>") == 2
    assert f"{run.pk}:1:0" in html and f"{run.pk}:1:1" in html
    assert "&quot;done&quot;: &quot;first&quot;" in html


def test_the_run_page_shows_the_transcript_of_a_run_started_from_the_console(
    client_for, enqueued, tenant_a
):
    client = client_for("member")
    client.post("/runs/start/", start_form(message="hello there"))
    [run] = rows(Run, tenant_a)
    assert step(run).status == "succeeded"  # the demo answers a greeting and finishes
    html = page_text(client.get(f"/runs/{run.pk}/"))
    assert "<strong>User</strong>" in html and "hello there" in html
    assert "<strong>Assistant</strong>" in html and "this is the refund desk" in html
    # A greeting needs no tool: the model's first turn answers it.
    assert "Step 1: <code>model</code>" in html and "Step 2:" not in html
    assert "&quot;turns&quot;: 1" in html  # the output


def test_a_run_without_a_conversation_says_so(client_for, start_as):
    run = start_as("admin")
    html = client_for("admin").get(f"/runs/{run.pk}/").content.decode()
    assert "This run has no conversation." in html
    assert "No step has run yet." in html


def test_an_unfinished_run_page_follows_the_websocket_and_does_not_poll(client_for, start_as):
    run = start_as("admin")
    client = client_for("admin")
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "hx-trigger" not in html[html.index('class="live-root"') :]
    assert 'ws-connect="/ws/live/"' in html
    assert f'data-live="run" data-run="{run.pk}" data-seq="1"' in html  # run.queued is 1
    live = client.get(f"/runs/{run.pk}/", **HX)
    assert live.content.decode().lstrip().startswith('<div id="run-live"')
    assert "HX-Request" in live["Vary"]


# --- approvals on the run page --------------------------------------------------------------------


@pytest.mark.parametrize("who", ["admin", "manager"])
def test_managers_and_admins_see_approve_and_reject_on_a_pending_request(client_for, pending, who):
    run, request = pending
    html = client_for(who).get(f"/runs/{run.pk}/").content.decode()
    assert f'action="/runs/{run.pk}/approvals/{request.pk}/decide/"' in html
    assert ">Approve</button>" in html and ">Reject</button>" in html
    assert f'<label for="comment-{request.pk}">' in html


def test_viewers_see_the_request_but_no_buttons(client_for, pending):
    run, request = pending
    html = client_for("viewer").get(f"/runs/{run.pk}/").content.decode()
    assert "Waiting for a manager or an admin to decide." in html
    assert ">Approve</button>" not in html


DECIDE_STATUS = {"admin": 200, "manager": 200, "member": 403, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", list(DECIDE_STATUS))
def test_deciding_needs_the_approve_scope_and_404s_for_outsiders(
    client_for, pending, tenant_a, who
):
    run, request = pending
    url = f"/runs/{run.pk}/approvals/{request.pk}/decide/"
    response = client_for(who).post(url, {"decision": "approve", "comment": "ok"}, **HX)
    assert response.status_code == DECIDE_STATUS[who]
    [after] = rows(ApprovalRequest, tenant_a, pk=request.pk)
    [resumed] = rows(Run, tenant_a, pk=run.pk)
    if DECIDE_STATUS[who] == 200:
        assert (after.status, after.comment) == ("approved", "ok")
        assert resumed.status == "queued" and resumed.wake_payload["decision"]["approved"]
        html = page_text(response)
        assert html.lstrip().startswith('<article class="approval decided"')
        assert f'id="approval-{request.pk}"' in html
        assert "Approved by <strong>" in html
    else:
        assert after.status == "pending" and resumed.status == "waiting_approval"


def test_rejecting_without_javascript_redirects_back_to_the_run(client_for, pending, tenant_a):
    run, request = pending
    client = client_for("manager")
    response = client.post(
        f"/runs/{run.pk}/approvals/{request.pk}/decide/", {"decision": "reject", "comment": "no"}
    )
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    [after] = rows(ApprovalRequest, tenant_a, pk=request.pk)
    assert after.status == "rejected"
    assert "Rejected: the run resumes." in client.get(response["Location"]).content.decode()


def test_a_second_decision_is_409_and_shows_who_decided(client_for, pending, members):
    run, request = pending
    url = f"/runs/{run.pk}/approvals/{request.pk}/decide/"
    assert client_for("manager").post(url, {"decision": "approve"}, **HX).status_code == 200
    for headers in (HX, {}):
        late = client_for("admin").post(url, {"decision": "reject"}, **headers)
        assert late.status_code == 409
        text = page_text(late)
        assert f"Already approved by {members['manager'].user.username}" in text
        assert ">Approve</button>" not in text


@pytest.mark.parametrize(
    "data", [{}, {"decision": "maybe"}, {"decision": "approve", "comment": "x" * 2001}]
)
def test_a_malformed_decision_is_400_and_changes_nothing(client_for, pending, tenant_a, data):
    run, request = pending
    response = client_for("manager").post(
        f"/runs/{run.pk}/approvals/{request.pk}/decide/", data, **HX
    )
    assert response.status_code == 400
    assert "Choose Approve or Reject" in response.content.decode()
    assert rows(ApprovalRequest, tenant_a, pk=request.pk)[0].status == "pending"


def test_an_approval_of_another_run_is_404(client_for, pending, start_as):
    _, request = pending
    other = start_as("admin")
    url = f"/runs/{other.pk}/approvals/{request.pk}/decide/"
    assert client_for("admin").post(url, {"decision": "approve"}).status_code == 404


def test_the_run_page_shows_where_the_time_went_including_the_wait_for_approval(
    client_for, pending, members
):
    run, request = pending
    with tenant_scope(run.tenant_id):  # the request waited ten minutes for a manager
        asked = timezone.now() - dt.timedelta(minutes=10, seconds=20)
        ApprovalRequest.objects.for_tenant(run.tenant_id).filter(pk=request.pk).update(
            requested_at=asked
        )
        Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(
            created_at=asked - dt.timedelta(seconds=1)
        )
        Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run).update(
            started_at=asked - dt.timedelta(milliseconds=40), created_at=asked
        )
    client = client_for("manager")
    client.post(f"/runs/{run.pk}/approvals/{request.pk}/decide/", {"decision": "approve"})
    step(run)
    html = page_text(client.get(f"/runs/{run.pk}/"))
    section = html[html.index('id="run-waterfall"') :]
    section = section[: section.index("</section>")]
    assert "Where the time went" in section
    assert 'role="img"' in section and "<title" in section and "<desc" in section
    assert re.search(r"Waiting for approval <strong>10 min [12]\d s</strong>", section)
    assert 'data-series="approval"' in section and 'data-series="step"' in section
    assert "approved by " in section  # who decided, in the table and the tooltip
    assert re.search(r"Step 1 · ask", section) and re.search(r"Step 2 · after", section)


def test_a_run_whose_checkpoints_came_from_elsewhere_draws_no_made_up_timings(client_for, tenant_a):
    run = make_run(tenant_a, status="running", started_at=timezone.now())  # checkpoint, no attempt
    html = page_text(client_for("admin").get(f"/runs/{run.pk}/"))
    section = html[html.index('id="run-waterfall"') :]
    section = section[: section.index("</section>")]
    assert "no step timings were recorded here" in section
    assert "<svg" not in section and "time-totals" not in section


def test_a_run_that_has_not_started_shows_its_time_in_the_queue(client_for, start_as):
    run = start_as("admin")
    html = page_text(client_for("admin").get(f"/runs/{run.pk}/"))
    section = html[html.index('id="run-waterfall"') :]
    section = section[: section.index("</section>")]
    assert "Queued for a worker <strong>" in section  # since it was created
    assert "No step has run yet" not in section  # the queue is where its time went so far


# --- cancelling -----------------------------------------------------------------------------------

CANCEL_STATUS = {"admin": 302, "manager": 302, "member": 302, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", list(CANCEL_STATUS))
def test_cancelling_needs_write_and_404s_for_outsiders(client_for, start_as, tenant_a, who):
    run = start_as("member")
    response = client_for(who).post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == CANCEL_STATUS[who]
    [after] = rows(Run, tenant_a, pk=run.pk)
    assert after.status == ("cancelled" if CANCEL_STATUS[who] == 302 else "queued")


def test_a_member_cannot_cancel_another_members_run(client_for, start_as, tenant_a):
    run = start_as(factories.make_member(tenant_a, "member"))
    assert client_for("member").post(f"/runs/{run.pk}/cancel/").status_code == 404


def test_cancelling_with_htmx_rerenders_the_live_section_and_stops_polling(
    client_for, pending, tenant_a
):
    run, request = pending
    response = client_for("admin").post(f"/runs/{run.pk}/cancel/", **HX)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="run-live"') and "hx-trigger" not in html
    assert 'status-cancelled">Cancelled<' in html
    assert rows(ApprovalRequest, tenant_a, pk=request.pk)[0].status == "cancelled"


def test_cancelling_a_finished_run_is_409_and_the_button_is_gone(client_for, start_as):
    run = start_as("admin")
    step(run)
    client = client_for("admin")
    assert "Cancel run" not in client.get(f"/runs/{run.pk}/").content.decode()
    response = client.post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == 409
    assert "already succeeded" in response.content.decode()


def test_viewers_see_no_cancel_button(client_for, start_as):
    run = start_as("admin")
    assert "Cancel run" not in client_for("viewer").get(f"/runs/{run.pk}/").content.decode()


# --- the registry ---------------------------------------------------------------------------------


def test_the_registry_lists_each_agent_with_its_steps_in_definition_order(client_for):
    html = page_text(client_for("viewer").get("/agents/"))
    assert "<code>refund_desk</code>" in html and "asks a manager" in html
    steps = re.search(r'refund_desk</code></h2>.*?<ol class="steps">(.*?)</ol>', html).group(1)
    assert re.findall(r"<code>(\w+)</code>", steps) == ["model", "tools"]  # a tool-calling agent
    assert '<code>model</code> <span class="muted">(first)</span>' in steps


def test_the_runs_page_links_to_the_registry(client_for):
    assert 'href="/agents/"' in client_for("viewer").get("/runs/").content.decode()


def test_every_form_field_has_a_label(client_for, pending):
    run, _ = pending
    client: Client = client_for("admin")
    for url in ("/runs/", f"/runs/{run.pk}/"):
        html = client.get(url).content.decode()
        ids = re.findall(r'<(?:input|select|textarea)[^>]*\bid="([^"]+)"', html)
        fields = re.findall(r"<(?:select|textarea)\b|<input(?![^>]*type=\"hidden\")", html)
        assert len(ids) == len(fields)
        for field_id in ids:
            assert f'<label for="{field_id}"' in html, field_id


def _statements(client: Client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def _statements_for_two_and_six(starter: Client, reader: Client, url: str) -> tuple[int, int]:
    """The statements `reader` spends on `url` with two runs started by `starter`, then six
    (started from the runs page, so each is in a conversation)."""
    counts = []
    for more in (2, 4):
        for _ in range(more):
            assert starter.post("/runs/start/", start_form()).status_code == 302
        counts.append(_statements(reader, url))
    return counts[0], counts[1]


@pytest.mark.parametrize("who", ["admin", "member"])
def test_the_runs_list_costs_the_same_statements_for_two_runs_as_for_six(
    client_for, enqueued, tenant_a, who
):
    """Each row shows who started it and its summary from the one read of the page: no row
    reads anything alone (runs in conversations, as the page starts them), for staff and for
    members."""
    client = client_for(who)
    two, six = _statements_for_two_and_six(client, client, "/runs/")
    assert six == two


def test_the_api_run_list_costs_the_same_statements_for_two_runs_as_for_six(
    client_for, enqueued, tenant_a
):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {factories.make_api_key(tenant_a, ['read']).raw}")
    two, six = _statements_for_two_and_six(client_for("admin"), client, "/api/v1/runs?limit=20")
    assert six == two
    assert len(client.get("/api/v1/runs?limit=20").json()["results"]) == 6
