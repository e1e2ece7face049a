"""The console's approvals pages: inbox, one request, deciding, badge, policies.

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from approvals.models import ApprovalPolicy, ApprovalRequest, ApproverGroup
from tenants.scope import tenant_scope
from tests.approvals.conftest import (
    HX,
    REFUND,
    add_group,
    add_policy,
    audit_actions,
    load_request,
    load_run,
    make_request,
    paused_refund,
)

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def pending(members):
    """A paused demo refund started by the admin (so it is not the member's own)."""
    return paused_refund(members["admin"])


@pytest.fixture
def own(members):
    """A paused demo refund the member started themselves."""
    return paused_refund(members["member"])


# --- the role matrix ------------------------------------------------------------------------------

INBOX = {"admin": 200, "manager": 200, "member": 200, "viewer": 200, "outsider": 200}
DETAIL = {"admin": 200, "manager": 200, "member": 404, "viewer": 200, "outsider": 404}
DECIDE = {"admin": 302, "manager": 302, "member": 403, "viewer": 403, "outsider": 404}
POLICIES = {"admin": 200, "manager": 200, "member": 403, "viewer": 403, "outsider": 200}
# The outsider is an admin too: their policy goes to their own tenant, never to tenant A.
POLICY_WRITE = {"admin": 302, "manager": 403, "member": 403, "viewer": 403, "outsider": 302}


@pytest.mark.parametrize("who", WHO)
def test_the_inbox_answers_every_role_and_shows_only_what_it_may_see(client_for, pending, who):
    _, request = pending
    response = client_for(who).get("/approvals/")
    assert response.status_code == INBOX[who]
    shown = f"/approvals/{request.pk}/" in response.content.decode()
    assert shown == (who in ("admin", "manager", "viewer"))


def test_a_member_sees_the_requests_of_their_own_runs_read_only(client_for, own):
    _, request = own
    client = client_for("member")
    html = client.get("/approvals/").content.decode()
    assert f"/approvals/{request.pk}/" in html and "You may decide" not in html
    page = client.get(f"/approvals/{request.pk}/")
    assert page.status_code == 200
    assert ">Approve</button>" not in page.content.decode()
    assert "Waiting for managers and admins to decide." in text(page)


@pytest.mark.parametrize("who", WHO)
def test_the_request_page_is_404_to_outsiders_and_to_members_who_did_not_start_it(
    client_for, pending, who
):
    _, request = pending
    assert client_for(who).get(f"/approvals/{request.pk}/").status_code == DETAIL[who]


@pytest.mark.parametrize("who", WHO)
def test_deciding_needs_the_approve_scope_and_is_404_to_outsiders(
    client_for, pending, tenant_a, who
):
    run, request = pending
    url = f"/approvals/{request.pk}/decide/"
    response = client_for(who).post(url, {"decision": "approve", "comment": "ok"})
    assert response.status_code == DECIDE[who]
    after = load_request(tenant_a, request.pk)
    if DECIDE[who] == 302:
        assert response["Location"] == f"/approvals/{request.pk}/"
        assert after.status == "approved" and load_run(run).status == "queued"
    else:
        assert after.status == "pending" and load_run(run).status == "waiting_approval"


@pytest.mark.parametrize("who", WHO)
def test_managers_read_the_policies_and_only_admins_change_them(client_for, tenant_a, who):
    assert client_for(who).get("/approvals/policies/").status_code == POLICIES[who]
    response = client_for(who).post(
        "/approvals/policies/",
        {"new-action": "issue_refund", "new-approver_role": "manager", "new-on_expiry": "wait"},
    )
    assert response.status_code == POLICY_WRITE[who]
    with tenant_scope(tenant_a.pk):
        created = ApprovalPolicy.objects.for_tenant(tenant_a).count()
    assert created == (1 if who == "admin" else 0)


@pytest.mark.parametrize("who", WHO)
def test_editing_and_deleting_a_policy_is_for_its_own_tenants_admins(
    client_for, members, tenant_a, who
):
    policy = add_policy(members["admin"])
    group = add_group(members["admin"], "Finance", [])
    expected = {"admin": 302, "outsider": 404}.get(who, 403)
    client = client_for(who)
    data = {f"p{policy.pk}-action": "issue_refund", f"p{policy.pk}-approver_role": "admin"}
    data[f"p{policy.pk}-on_expiry"] = "wait"
    assert client.post(f"/approvals/policies/{policy.pk}/", data).status_code == expected
    members_url = f"/approvals/groups/{group.pk}/members/"
    assert client.post(members_url, {}).status_code == expected
    assert client.post(f"/approvals/groups/{group.pk}/delete/").status_code == expected
    assert client.post(f"/approvals/policies/{policy.pk}/delete/").status_code == expected


@pytest.mark.parametrize(
    "url",
    ["/approvals/", "/approvals/badge/", "/approvals/policies/", "/approvals/{pk}/"],
)
def test_anonymous_visitors_are_sent_to_log_in(client_for, pending, url):
    response = client_for("anonymous").get(url.format(pk=pending[1].pk))
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_an_unknown_request_is_404(client_for):
    import uuid

    assert client_for("admin").get(f"/approvals/{uuid.uuid4()}/").status_code == 404


# --- the inbox ------------------------------------------------------------------------------------


def rows_of(html: str) -> list[str]:
    return re.findall(r'href="/approvals/([0-9a-f-]{36})/"', html)


def test_pending_requests_come_soonest_deadline_first_and_no_deadline_last(client_for, members):
    late = make_request(members["member"], due_in=dt.timedelta(hours=5))
    none = make_request(members["member"])
    soon = make_request(members["member"], due_in=dt.timedelta(minutes=5))
    overdue = make_request(members["member"], due_in=dt.timedelta(minutes=1))
    with tenant_scope(overdue.tenant_id):
        ApprovalRequest.objects.for_tenant(overdue.tenant_id).filter(pk=overdue.pk).update(
            due_at=timezone.now() - dt.timedelta(minutes=1)
        )
    html = client_for("manager").get("/approvals/").content.decode()
    assert rows_of(html) == [str(r.pk) for r in (overdue, soon, late, none)]
    assert "overdue</span>" in html and "no deadline" in html
    assert "past their deadline" in html


def test_keyset_pages_walk_every_pending_request_once(client_for, members):
    made = [make_request(members["member"]) for _ in range(30)]
    same = timezone.now() + dt.timedelta(hours=1)
    with tenant_scope(made[0].tenant_id):  # ties on the deadline, and rows with none
        for i, request in enumerate(made):
            due = None if i % 3 == 0 else same if i % 3 == 1 else same + dt.timedelta(minutes=i)
            ApprovalRequest.objects.for_tenant(request.tenant_id).filter(pk=request.pk).update(
                due_at=due
            )
    client = client_for("manager")
    seen, url = [], "/approvals/"
    while url:
        html = client.get(url).content.decode()
        seen += rows_of(html)
        found = re.search(r'href="/approvals/(\?[^"]*after=[^"]+)"[^>]*>Next page', html)
        url = "/approvals/" + found.group(1).replace("&amp;", "&") if found else None
    assert sorted(seen) == sorted(str(r.pk) for r in made)
    assert len(seen) == len(set(seen)) == 30


def test_filters_narrow_by_status_action_and_who_may_decide(client_for, members, tenant_a):
    add_policy(members["admin"], action="billing_history", approver_role="admin")
    mine = make_request(members["member"])
    admins_only = make_request(members["member"], action="billing_history", arguments={})
    decided = make_request(members["member"])
    client = client_for("manager")
    client.post(f"/approvals/{decided.pk}/decide/", {"decision": "approve"})
    assert set(rows_of(client.get("/approvals/").content.decode())) == {
        str(mine.pk),
        str(admins_only.pk),
    }
    assert rows_of(client.get("/approvals/?mine=on").content.decode()) == [str(mine.pk)]
    assert rows_of(client.get("/approvals/?action=billing_history").content.decode()) == [
        str(admins_only.pk)
    ]
    assert rows_of(client.get("/approvals/?status=approved").content.decode()) == [str(decided.pk)]
    assert rows_of(client.get("/approvals/?status=decided").content.decode()) == [str(decided.pk)]


@pytest.mark.parametrize(
    "query", ["status=maybe", "after=nonsense", "after=WyJwIiwxLDIsM10", "action=" + "x" * 101]
)
def test_a_bad_filter_is_a_400_with_a_way_back(client_for, members, query):
    make_request(members["member"])
    response = client_for("manager").get(f"/approvals/?{query}")
    assert response.status_code == 400
    page = text(response)
    assert 'class="filter-problems" id="inbox-filters-problems" role="alert"' in page
    assert '<a href="/approvals/">Clear this filter</a>' in page


def test_the_inbox_list_subscribes_to_the_live_feed_instead_of_polling(client_for, members):
    request = make_request(members["member"])
    client = client_for("manager")
    page = client.get("/approvals/?action=issue_refund").content.decode()
    assert "every " not in page and 'ws-connect="/ws/live/"' in page
    assert 'data-live="approvals" data-filter="action=issue_refund"' in page
    fragment = client.get("/approvals/", **HX)
    assert fragment.status_code == 200 and "HX-Request" in fragment["Vary"]
    html = fragment.content.decode()
    assert html.lstrip().startswith('<div id="inbox-list"') and str(request.pk) in html
    assert "<html" not in html


def test_the_filter_form_swaps_only_the_list(client_for, members):
    make_request(members["member"])
    html = client_for("manager").get("/approvals/?status=approved", **HX).content.decode()
    assert html.lstrip().startswith('<div id="inbox-list"')
    assert "Nothing is waiting" not in html and "No requests match." in html


# --- one request ----------------------------------------------------------------------------------


def test_the_request_page_shows_the_action_arguments_reason_transcript_memory_and_audit(
    client_for, pending
):
    _, request = pending
    page = text(client_for("manager").get(f"/approvals/{request.pk}/"))
    assert "<code>issue_refund</code> for 400.00" in page
    for name, value in REFUND.items():
        assert f'<code>{name}</code></th><td class="value">{value}</td>' in page
    assert "Refund money to the customer through the payment provider." in page
    assert "Refund 400.00 USD for order A-1001: duplicate charge." in page  # the reason
    assert "Please refund $400 for order A-1001, I was charged twice" in page  # transcript
    assert "The step retrieved no remembered facts about this person." in page
    assert "<code>approval.requested</code> by agent" in page
    assert ">Approve</button>" in page and ">Reject</button>" in page
    assert 'name="arg-amount" value="400.00"' in page
    assert "Managers and admins" in page and "the default: no policy covers this action" in page


def test_the_request_page_says_why_someone_may_not_decide(client_for, members):
    add_policy(members["admin"], four_eyes=True)
    _, request = paused_refund(members["manager"])
    page = text(client_for("manager").get(f"/approvals/{request.pk}/"))
    assert "You started this run; the four-eyes rule needs someone else to decide." in page
    assert ">Approve</button>" not in page


def test_the_run_page_offers_the_decision_only_to_those_the_policy_lets_decide(client_for, members):
    add_policy(members["admin"], four_eyes=True)
    run, _ = paused_refund(members["manager"])
    starter = text(client_for("manager").get(f"/runs/{run.pk}/"))
    assert ">Approve</button>" not in starter
    assert "the four-eyes rule needs someone else to decide" in starter
    other = text(client_for("admin").get(f"/runs/{run.pk}/"))
    assert ">Approve</button>" in other and ">Reject</button>" in other


def test_the_request_page_subscribes_to_its_request_instead_of_polling(client_for, pending):
    run, request = pending
    client = client_for("manager")
    page = client.get(f"/approvals/{request.pk}/").content.decode()
    assert "every " not in page and 'ws-connect="/ws/live/"' in page
    assert f'data-live="approvals" data-filter="request={request.pk}"' in page
    client_for("admin").post(f"/approvals/{request.pk}/decide/", {"decision": "approve"})
    swapped = client.get(f"/approvals/{request.pk}/", **HX)
    assert swapped.status_code == 200
    assert swapped.content.decode().lstrip().startswith('<div id="approval-live"')
    assert "Approved by <strong>" in text(swapped)


# --- deciding -------------------------------------------------------------------------------------


def test_approving_over_htmx_swaps_the_page_in_place_and_refreshes_the_badge(
    client_for, pending, tenant_a
):
    run, request = pending
    response = client_for("manager").post(
        f"/approvals/{request.pk}/decide/", {"decision": "approve", "comment": "fine"}, **HX
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == "approvals-changed"
    html = text(response)
    assert html.lstrip().startswith('<div id="approval-live"')
    assert "Approved by <strong>" in html and "Approved as proposed." in html
    assert "Queued" in html  # the run was handed the decision
    assert load_request(tenant_a, request.pk).comment == "fine"


def test_rejecting_needs_a_comment_and_a_missing_one_decides_nothing(client_for, pending, tenant_a):
    _, request = pending
    client = client_for("manager")
    url = f"/approvals/{request.pk}/decide/"
    refused = client.post(url, {"decision": "reject", "comment": "  "}, **HX)
    assert refused.status_code == 400
    assert "Say why you reject" in refused.content.decode()
    assert load_request(tenant_a, request.pk).status == "pending"
    done = client.post(url, {"decision": "reject", "comment": "not a duplicate"}, **HX)
    assert done.status_code == 200
    assert load_request(tenant_a, request.pk).status == "rejected"


def test_approving_with_edited_arguments_hands_the_run_the_new_amount(
    client_for, pending, tenant_a
):
    run, request = pending
    response = client_for("manager").post(
        f"/approvals/{request.pk}/decide/",
        {
            "decision": "approve",
            "edit": "1",
            "arg-customer": "ada@example.com",
            "arg-order": "A-1001",
            "arg-amount": "250.00",
            "comment": "half now",
        },
        **HX,
    )
    assert response.status_code == 200
    html = text(response)
    assert "Approved with changed arguments" in html
    assert "<del>400.00</del>" in html and "<ins>250.00</ins>" in html
    decision = load_run(run).wake_payload["decision"]
    assert decision["arguments"] == {**REFUND, "amount": "250.00"} and decision["edited"]
    assert "approval.arguments_edited" in audit_actions(request)


@pytest.mark.parametrize(
    "fields,error",
    [
        ({"arg-amount": "250"}, "&quot;250&quot; is not in the expected format, like 400.00."),
        ({"arg-amount": "a lot"}, "is not in the expected format"),
        ({"arg-order": "B-1"}, "&quot;B-1&quot; is not in the expected format, like A-1001."),
        ({"arg-customer": ""}, "This cannot be empty."),
    ],
)
def test_edited_arguments_that_break_the_schema_are_a_400_and_nothing_is_decided(
    client_for, pending, tenant_a, fields, error
):
    run, request = pending
    data = {"decision": "approve", "edit": "1", **{f"arg-{k}": v for k, v in REFUND.items()}}
    data.update(fields)
    response = client_for("manager").post(f"/approvals/{request.pk}/decide/", data, **HX)
    assert response.status_code == 400
    html = response.content.decode()
    assert error in html and 'aria-invalid="true"' in html
    assert "nothing was decided" in html
    assert '<details class="edit-args" open>' in html  # the draft stays open, with its values
    assert load_request(tenant_a, request.pk).status == "pending"
    assert load_run(run).status == "waiting_approval"


def test_arguments_of_a_tool_without_a_flat_schema_are_edited_as_json(
    client_for, members, tenant_a
):
    request = make_request(members["member"], action="unknown_tool", arguments={"x": [1, 2]})
    client = client_for("manager")
    page = client.get(f"/approvals/{request.pk}/").content.decode()
    assert 'name="arguments_json"' in page
    url = f"/approvals/{request.pk}/decide/"
    bad = client.post(url, {"decision": "approve", "edit": "1", "arguments_json": "{"}, **HX)
    assert (
        bad.status_code == 400
        and "Line 1, column 2: A key in double quotes" in bad.content.decode()
    )
    not_object = {"decision": "approve", "edit": "1", "arguments_json": "[1]"}
    assert client.post(url, not_object, **HX).status_code == 400
    good = {"decision": "approve", "edit": "1", "arguments_json": '{"x": [3]}'}
    assert client.post(url, good, **HX).status_code == 200
    assert load_request(tenant_a, request.pk).edited_arguments == {"x": [3]}


@pytest.mark.parametrize(
    "data",
    [{}, {"decision": "maybe"}, {"decision": "approve", "comment": "x" * 2001}],
    ids=["nothing", "unknown-decision", "long-comment"],
)
def test_a_malformed_decision_is_400_and_changes_nothing(client_for, pending, tenant_a, data):
    _, request = pending
    response = client_for("manager").post(f"/approvals/{request.pk}/decide/", data, **HX)
    assert response.status_code == 400
    assert load_request(tenant_a, request.pk).status == "pending"


def test_the_second_decider_gets_409_and_sees_who_decided_what(client_for, pending, members):
    _, request = pending
    url = f"/approvals/{request.pk}/decide/"
    first = client_for("manager").post(
        url, {"decision": "reject", "comment": "not a duplicate"}, **HX
    )
    assert first.status_code == 200
    for headers in (HX, {}):
        late = client_for("admin").post(url, {"decision": "approve"}, **headers)
        assert late.status_code == 409
        html = text(late)
        assert f"Already rejected by {members['manager'].user.username}." in html
        assert "not a duplicate" in html and ">Approve</button>" not in html


def test_a_decision_for_a_request_someone_may_not_decide_is_403(client_for, members, tenant_a):
    add_policy(members["admin"], approver_role="admin")
    _, request = paused_refund(members["member"])
    response = client_for("manager").post(
        f"/approvals/{request.pk}/decide/", {"decision": "approve"}
    )
    assert response.status_code == 403
    assert "This request is for admins only." in response.content.decode()
    assert load_request(tenant_a, request.pk).status == "pending"


# --- the nav badge --------------------------------------------------------------------------------


def test_the_badge_counts_what_each_person_may_decide_and_polls(client_for, members):
    add_policy(members["admin"], action="billing_history", approver_role="admin")
    make_request(members["member"])
    make_request(members["member"], action="billing_history", arguments={})

    def badge(who):
        html = client_for(who).get("/runs/").content.decode()
        found = re.search(r'<span id="approvals-badge"[^>]*>(\d*)', html)
        return found and found.group(1)

    assert badge("admin") == "2"
    assert badge("manager") == "1"
    assert badge("viewer") is None and badge("member") is None
    client = client_for("manager")
    assert client.get("/approvals/badge/?shown=1", **HX).status_code == 204
    make_request(members["member"])
    fresh = client.get("/approvals/badge/?shown=1", **HX)
    assert fresh.status_code == 200 and ">2<span" in fresh.content.decode()


def test_the_badge_poll_costs_one_count_of_the_requests(client_for, members):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_request(members["member"])
    client = client_for("manager")
    with CaptureQueriesContext(connection) as queries:
        client.get("/approvals/badge/?shown=1", **HX)
    badge_queries = [q for q in queries if "approvals_approvalrequest" in q["sql"]]
    assert len(badge_queries) == 1


# --- policies -------------------------------------------------------------------------------------


def test_an_admin_adds_edits_and_deletes_a_policy_and_creates_a_group(
    client_for, members, tenant_a
):
    client = client_for("admin")
    created = client.post("/approvals/groups/", {"name": "Finance"})
    assert created.status_code == 302
    with tenant_scope(tenant_a.pk):
        group = ApproverGroup.objects.for_tenant(tenant_a).get(name="Finance")
    manager_id = str(members["manager"].user_id)
    assert (
        client.post(
            f"/approvals/groups/{group.pk}/members/", {f"g{group.pk}-users": [manager_id]}
        ).status_code
        == 302
    )
    response = client.post(
        "/approvals/policies/",
        {
            "new-action": "issue_refund",
            "new-amount_threshold": "100.00",
            "new-approver_role": "manager",
            "new-approver_group": str(group.pk),
            "new-four_eyes": "on",
            "new-expires_after_minutes": "120",
            "new-on_expiry": "escalate",
        },
    )
    assert response.status_code == 302
    with tenant_scope(tenant_a.pk):
        policy = ApprovalPolicy.objects.for_tenant(tenant_a).get()
    assert (policy.amount_threshold, policy.approver_group_id, policy.four_eyes) == (
        100,
        group.pk,
        True,
    )
    page = text(client.get("/approvals/policies/"))
    assert "when the amount is above 100.00" in page and "120 minutes, then escalate" in page
    edit = client.post(
        f"/approvals/policies/{policy.pk}/",
        {
            f"p{policy.pk}-action": "issue_refund",
            f"p{policy.pk}-approver_role": "admin",
            f"p{policy.pk}-on_expiry": "wait",
        },
    )
    assert edit.status_code == 302
    with tenant_scope(tenant_a.pk):
        policy.refresh_from_db()
    assert (policy.approver_role, policy.approver_group_id, policy.version) == ("admin", None, 2)
    assert client.post(f"/approvals/policies/{policy.pk}/delete/").status_code == 302
    assert client.post(f"/approvals/groups/{group.pk}/delete/").status_code == 302


@pytest.mark.parametrize(
    "data,field,message",
    [
        ({"new-action": "no_such_tool"}, "action", "Select a valid choice"),
        ({"new-amount_threshold": "-1"}, "amount_threshold", "cannot be negative"),
        ({"new-amount_threshold": "lots"}, "amount_threshold", "Enter a number"),
        ({"new-on_expiry": "reject"}, "expires_after_minutes", "Set a deadline"),
        ({"new-expires_after_minutes": "0"}, "expires_after_minutes", "At least one minute"),
        (
            {"new-approver_role": "admin", "new-on_expiry": "escalate",
             "new-expires_after_minutes": "5"},
            "on_expiry",
            "there is no one above",
        ),
        ({"new-approver_group": "999999"}, "approver_group", "Select a valid choice"),
    ],
    ids=["unknown-action", "negative", "not-a-number", "no-deadline", "zero-minutes",
         "escalate-above-admins", "unknown-group"],
)  # fmt: skip
def test_a_bad_policy_is_a_400_naming_the_field_and_saves_nothing(
    client_for, tenant_a, data, field, message
):
    base = {"new-action": "issue_refund", "new-approver_role": "manager", "new-on_expiry": "wait"}
    response = client_for("admin").post("/approvals/policies/", {**base, **data})
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html
    # The refused field's control names its message, so a screen reader reads it with it.
    control = re.search(rf'<[^>]+ id="id_new-{field}"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in control
    assert f"id_new-{field}_error" in re.search(r'aria-describedby="([^"]+)"', control).group(1)
    assert re.search(
        rf'<span class="error" id="id_new-{field}_error">[^<]*{re.escape(message)}', html
    )
    with tenant_scope(tenant_a.pk):
        assert not ApprovalPolicy.objects.for_tenant(tenant_a).exists()


def test_a_second_policy_for_the_same_action_is_refused(client_for, members):
    add_policy(members["admin"])
    data = {"new-action": "issue_refund", "new-approver_role": "manager", "new-on_expiry": "wait"}
    response = client_for("admin").post("/approvals/policies/", data)
    assert response.status_code == 400
    assert "already has a policy" in response.content.decode()


def test_a_group_of_another_tenant_cannot_be_named_in_a_policy_or_edited(
    client_for, outsider, tenant_a
):
    theirs = add_group(outsider, "Theirs", [])
    data = {
        "new-action": "issue_refund",
        "new-approver_role": "manager",
        "new-on_expiry": "wait",
        "new-approver_group": str(theirs.pk),
    }
    assert client_for("admin").post("/approvals/policies/", data).status_code == 400
    url = f"/approvals/groups/{theirs.pk}/members/"
    assert client_for("admin").post(url, {}).status_code == 404


def test_a_group_member_must_be_a_manager_or_admin_of_the_tenant(client_for, members, outsider):
    group = add_group(members["admin"], "Finance", [])
    for user in (members["viewer"].user, outsider.user):
        response = client_for("admin").post(
            f"/approvals/groups/{group.pk}/members/", {f"g{group.pk}-users": [str(user.pk)]}
        )
        assert response.status_code == 400


def test_deleting_a_group_a_policy_uses_is_refused_with_a_message(client_for, members):
    group = add_group(members["admin"], "Finance", [])
    add_policy(members["admin"], approver_group=group)
    response = client_for("admin").post(f"/approvals/groups/{group.pk}/delete/")
    assert response.status_code == 409
    assert "still used by a policy" in response.content.decode()


def test_the_policies_page_is_read_only_for_managers(client_for, members):
    add_policy(members["admin"])
    html = client_for("manager").get("/approvals/policies/").content.decode()
    assert "<form" not in html.split("<main")[1].replace('action="/logout/"', "")
    assert "Managers and admins" in html


def test_inbox_links_are_kept_as_the_filters_change(client_for, members):
    for _ in range(30):
        make_request(members["member"])
    html = client_for("manager").get("/approvals/?action=issue_refund&mine=on").content.decode()
    found = re.search(r'href="/approvals/\?([^"]+)"[^>]*>Next page', html)
    query = parse_qs(urlsplit("?" + found.group(1).replace("&amp;", "&")).query)
    assert query["action"] == ["issue_refund"] and query["mine"] == ["on"] and query["after"]
