"""JSON that arrives inside something else: the approvals arguments editor, the console's
state editor, keyset cursors in query strings, tool calls from the model. Each goes through
core.json_input and is refused in its own words, never with a 500."""

from __future__ import annotations

import base64
import json

import pytest

from agents.runtime.definitions import get_agent
from agents.runtime.errors import InvalidState
from agents.runtime.llm import _tool_call
from agents.runtime.repairs import parse_state
from approvals.arguments import EditableField, coerce
from tenants.models import Role
from tests import factories
from tests.approvals.conftest import HX, load_request, make_request
from tests.tenants.test_api_keys import api

DEEP = "[" * 40 + "]" * 40


def cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"x": "a\\u0000b"}', "x: Contains a NUL"),
        ('{"x\\ud800": 1}', "x\\ud800: Contains a lone surrogate"),
        ('{"x": ' + DEEP + "}", "x"),
    ],
)
def test_the_json_arguments_editor_names_the_bad_field_and_decides_nothing(
    client_for, members, tenant_a, text, shown
):
    request = make_request(members[Role.MEMBER], action="unknown_tool", arguments={"x": [1]})
    response = client_for(Role.MANAGER).post(
        f"/approvals/{request.pk}/decide/",
        {"decision": "approve", "edit": "1", "arguments_json": text},
        **HX,
    )
    assert response.status_code == 400
    assert shown in response.content.decode()
    assert load_request(tenant_a, request.pk).status == "pending"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"item": "a\\u0000", "qty": 1}', "item: Contains a NUL"),
        ('{"item": {"\\udc00": 1}}', "item.\\udc00: Contains a lone surrogate"),
        ('{"item": ' + DEEP + "}", "nested deeper than 32"),
        ("[" * 100_000, "nested deeper than 32"),
    ],
)
def test_the_state_editor_refuses_characters_and_depth_naming_the_field(raw, problem):
    with pytest.raises(InvalidState) as refused:
        parse_state(raw, get_agent("refund_desk"))
    assert any(problem in p for p in refused.value.problems), refused.value.problems


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 2000,  # deeper than the parser's recursion
        '["2026-01-01T00:00:00+00:00\\u0000", "7d3c7f7e-6a55-4c4b-9c61-1f0a3a8f2b10"]',
        '["\\ud800", "x"]',
    ],
)
def test_a_forged_api_cursor_is_a_field_error(tenant_a, raw):
    key = factories.make_api_key(tenant_a, ["read"])
    response = api(key.raw).get("/api/v1/runs", {"before": cursor(raw)})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["before"]


@pytest.mark.parametrize(
    "raw",
    ["[" * 290, '["p", null, "\\u0000", "7d3c7f7e-6a55-4c4b-9c61-1f0a3a8f2b10"]'],
)
def test_a_forged_inbox_cursor_is_not_a_500(client_for, raw):
    response = client_for(Role.MANAGER).get("/approvals/", {"after": cursor(raw)})
    assert response.status_code in (200, 400)


@pytest.mark.parametrize(
    "arguments", ['{"a": "\\u0000"}', '{"a\\ud800": 1}', json.dumps({"a": 1})[:-1] + "[" * 5000]
)
def test_a_tool_call_the_database_could_not_store_keeps_no_arguments(arguments):
    # The tool-calling loop tells the model its arguments were not an object (issue 16);
    # nothing the ledger or a checkpoint could not store is kept.
    assert _tool_call("call-1", "lookup", arguments) == {
        "id": "call-1",
        "name": "lookup",
        "arguments": None,
    }


@pytest.mark.parametrize("raw", ["nan", "inf", "-Infinity", "1e999"])
def test_a_number_field_of_the_arguments_editor_never_holds_what_json_cannot(raw):
    field = EditableField(
        name="n", type="number", value="", required=True, description="", pattern=""
    )
    assert coerce([field], {"n": raw}) == {"n": raw}  # the schema check then names the field
