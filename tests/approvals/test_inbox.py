"""The inbox's rows say whom a request is about, how much in which currency, how long it has
waited and which run asked; a chart shows how long the pending ones have waited.

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

import pytest
from django.utils import timezone

from agents.runtime.models import Run
from approvals.models import ApprovalRequest
from tenants.scope import tenant_scope
from tests.approvals.conftest import HX, make_request, paused_refund

pytestmark = pytest.mark.django_db
SVG = "{http://www.w3.org/2000/svg}"


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def row_of(html: str, request: ApprovalRequest) -> str:
    link = html.index(f'href="/approvals/{request.pk}/"')
    return html[html.rindex("<tr", 0, link) : html.index("</tr>", link)]


def waited(request: ApprovalRequest, delta: dt.timedelta, **fields) -> None:
    with tenant_scope(request.tenant_id):
        ApprovalRequest.objects.for_tenant(request.tenant_id).filter(pk=request.pk).update(
            requested_at=timezone.now() - delta, **fields
        )


def age_chart(html: str) -> ET.Element:
    start = html.index('<figure class="chart')
    return ET.fromstring(html[start : html.index("</figure>", start) + len("</figure>")])


def bars(figure: ET.Element) -> dict[tuple[str, str], float]:
    return {
        (r.get("data-bucket"), r.get("data-series")): float(r.get("data-value"))
        for r in figure.iter(f"{SVG}rect")
    }


def test_a_row_shows_the_customer_the_amount_with_its_currency_the_age_and_the_run(
    client_for, members
):
    run, request = paused_refund(members["admin"])
    waited(request, dt.timedelta(minutes=12))
    row = row_of(text(client_for("manager").get("/approvals/")), request)
    assert '<code>issue_refund</code><br><span class="customer">for ada@example.com</span>' in row
    assert '400.00 <abbr class="currency" title="USD">USD</abbr>' in row
    assert re.search(r'<time datetime="[^"]+" title="[^"]+">12 min ago</time>', row)
    assert f'<a href="/runs/{run.pk}/">Asked: refund 400.00 for A-1001</a>' in row
    assert 'Review<span class="visually-hidden"> issue_refund for 400.00 USD' in row


def test_a_currency_named_in_the_arguments_wins_and_none_at_all_is_said_plainly(
    client_for, members
):
    euros = make_request(
        members["member"],
        arguments={"customer": "bo@example.com", "amount": "12.50", "currency": "eur"},
        amount="12.50",
    )
    unknown = make_request(members["member"], action="pay", arguments={"total": 3}, amount=3)
    with tenant_scope(unknown.tenant_id):
        Run.objects.for_tenant(unknown.tenant_id).filter(pk=unknown.run_id).update(agent="other")
    html = text(client_for("manager").get("/approvals/"))
    assert '12.50 <abbr class="currency" title="EUR">EUR</abbr>' in row_of(html, euros)
    assert "for bo@example.com" in row_of(html, euros)
    row = row_of(html, unknown)
    assert '3.00 <span class="muted">(no currency given)</span>' in row
    assert "for ada" in row  # no customer in the arguments: the run's


def test_the_inbox_charts_pending_requests_by_how_long_they_waited_and_their_deadline(
    client_for, members
):
    fresh = make_request(members["member"])
    hours = make_request(members["member"])
    waited(hours, dt.timedelta(hours=3))
    late = make_request(members["member"])
    waited(late, dt.timedelta(days=2), due_at=timezone.now() - dt.timedelta(hours=1))
    decided = make_request(members["member"])
    client = client_for("manager")
    client.post(f"/approvals/{decided.pk}/decide/", {"decision": "approve"})
    html = client.get("/approvals/").content.decode()
    figure = age_chart(html)
    assert figure.find(f"{SVG}svg").get("role") == "img"
    assert bars(figure) == {
        ("Under 5 min", "ontime"): 1,
        ("2–8 h", "ontime"): 1,
        ("1–3 days", "late"): 1,
    }
    desc = figure.find(f"{SVG}svg/{SVG}desc").text
    assert desc == "3 pending, 1 past their deadline; the oldest waited 1–3 days."
    assert fresh and "Pending requests by how long they have waited" in html


def test_the_age_chart_counts_only_what_the_reader_may_see(client_for, members, outsider):
    make_request(members["admin"])
    own = make_request(members["member"])
    waited(own, dt.timedelta(hours=1))
    make_request(outsider)
    manager = age_chart(client_for("manager").get("/approvals/").content.decode())
    assert sum(bars(manager).values()) == 2  # the tenant's two, not tenant B's
    member = age_chart(client_for("member").get("/approvals/").content.decode())
    assert bars(member) == {("30 min–2 h", "ontime"): 1}  # their own run's only
    theirs = age_chart(client_for("outsider").get("/approvals/").content.decode())
    assert bars(theirs) == {("Under 5 min", "ontime"): 1}


def test_an_empty_inbox_says_there_is_nothing_to_chart_and_history_has_no_chart(client_for):
    html = text(client_for("manager").get("/approvals/"))
    assert '<p class="chart-empty-note">No request is waiting: nothing to chart.</p>' in html
    decided = text(client_for("manager").get("/approvals/?status=decided", **HX))
    assert "chart" not in decided


def test_the_live_inbox_list_carries_the_chart_too(client_for, members):
    make_request(members["member"])
    fragment = client_for("manager").get("/approvals/", **HX).content.decode()
    assert fragment.lstrip().startswith('<div id="inbox-list"')
    assert 'id="approvals-by-age"' in fragment


def test_the_tenants_age_chart_in_one_statement_counts_as_the_rules_for_a_members_own_do(
    members,
):
    """The chart of a reader who sees the whole tenant is one SQL statement; a member's own is
    built with the ORM. Both put each request in the same bucket, on every boundary."""
    from approvals import selectors
    from tests import factories

    now = timezone.now()
    ages = [-30, 0, 299, 300, 1799, 1800, 7199, 7200, 28800, 86399, 86400, 259200, 900000]
    for i, seconds in enumerate(ages):
        request = make_request(members["member"])
        with tenant_scope(request.tenant_id):
            ApprovalRequest.objects.filter(pk=request.pk).update(
                requested_at=now - dt.timedelta(seconds=seconds),
                due_at=None if i % 3 == 0 else now + dt.timedelta(hours=1 if i % 3 == 1 else -1),
            )
    manager = factories.principal_for(members["manager"])
    with tenant_scope(manager.tenant.pk):
        one_statement = selectors.pending_by_age(manager, now=now)
        orm_rules = selectors._pending_by_age(manager, now)
    assert one_statement == orm_rules
    assert sum(ok + late for _, _, ok, late in one_statement) == len(ages)
    assert [ok + late for _, _, ok, late in one_statement] == [3, 2, 2, 1, 2, 1, 2]
