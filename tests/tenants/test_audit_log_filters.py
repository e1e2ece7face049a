"""The audit log says no like every list: a bad position is said in the same summary, is not
applied (the log starts from the newest event), and the answer is a 400."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.mark.parametrize("before", ["abc", "²", "-3", "0", "9" * 19])
def test_the_audit_log_with_a_bad_position_says_so_and_shows_the_newest(client_for, before):
    response = client_for("admin").get("/admin/audit/", {"before": before})
    assert response.status_code == 400
    page = text(response)
    assert '<div class="filter-problems" id="audit-problems" role="alert">' in page
    assert "is not a position in the log: it starts from the newest event." in page
    assert '<a href="/admin/audit/">Show the newest events</a>' in page
    assert "<code>membership.added</code>" in page  # the newest events are shown


def test_the_audit_log_with_a_good_position_says_nothing(client_for):
    response = client_for("admin").get("/admin/audit/?before=9999999")
    assert response.status_code == 200 and "filter-problems" not in text(response)
