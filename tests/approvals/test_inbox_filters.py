"""The inbox says no like every list: a bad filter is said beside its field and in a
summary, is not applied (the others are), and the answer is a 400 (page and fragment)."""

from __future__ import annotations

import re

import pytest

from tests.approvals.conftest import HX, make_request

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def rows_of(html: str) -> list[str]:
    return re.findall(r'href="/approvals/([0-9a-f-]{36})/"', html)


def test_inbox_with_an_unknown_status_shows_an_inline_error(client_for, members):
    request = make_request(members["member"])
    for headers in ({}, HX):
        response = client_for("manager").get("/approvals/?status=maybe", **headers)
        assert response.status_code == 400
        page = text(response)
        assert '<span class="error" id="filter-status-error">“maybe” is not a status. ' in page
        assert "Choose one of: pending, decided, approved, rejected, expired, cancelled." in page
        assert 'aria-invalid="true" aria-describedby="filter-status-error"' in page
        assert '<div class="filter-problems" id="inbox-filters-problems" role="alert">' in page
        assert rows_of(page) == [str(request.pk)]  # the pending ones, as without a status


def test_inbox_applies_the_good_filters_beside_a_bad_position(client_for, members):
    refund = make_request(members["member"])
    history = make_request(members["member"], action="billing_history", arguments={})
    response = client_for("manager").get("/approvals/?action=billing_history&after=nonsense")
    assert response.status_code == 400
    page = text(response)
    assert rows_of(page) == [str(history.pk)] and str(refund.pk) not in page
    assert "<li>Position: “nonsense” is not a position in the list" in page
    assert 'href="/approvals/?action=billing_history">Clear this filter</a>' in page


def test_inbox_offers_an_action_no_longer_registered_that_was_asked_for(client_for):
    page = text(client_for("manager").get("/approvals/?action=retired_tool"))
    assert '<option value="retired_tool" selected>retired_tool</option>' in page


def test_inbox_offers_only_requests_i_may_decide_to_those_who_may_decide(client_for):
    assert 'name="mine"' in text(client_for("manager").get("/approvals/"))
    assert 'name="mine"' not in text(client_for("member").get("/approvals/"))
