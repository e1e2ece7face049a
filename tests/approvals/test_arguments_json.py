"""Edited arguments written as JSON say no like the console's state editor: line, column and
a marker under the spot, beside the text; nothing is decided."""

from __future__ import annotations

import re

import pytest

from tests.approvals.conftest import HX, load_request, make_request

pytestmark = pytest.mark.django_db


def test_bad_json_in_the_edited_arguments_shows_line_column_and_a_marker(
    client_for, members, tenant_a
):
    request = make_request(members["member"], action="unknown_tool", arguments={"x": [1, 2]})
    broken = '{\n  "x": [3 4]\n}'
    response = client_for("manager").post(
        f"/approvals/{request.pk}/decide/",
        {"decision": "approve", "edit": "1", "arguments_json": broken},
        **HX,
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Line 2, column 11: A comma (,) or a closing bracket is missing before this." in page
    marker = re.search(r'<pre class="json-marker"[^>]*>(.*?)</pre>', page, re.S)
    assert marker is not None
    shown = re.sub(r"<[^>]+>", "", marker.group(1)).split("\n")
    assert shown == ["2 │   &quot;x&quot;: [3 4]", "  │ " + " " * 10 + "^"]  # under the 4
    assert 'aria-describedby="arguments-json-' in page and "Expecting" not in page
    fresh = load_request(tenant_a, request.pk)
    assert fresh.status == "pending" and fresh.edited_arguments is None
