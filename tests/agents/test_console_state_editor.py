"""The console's state editor says no like every form: bad JSON is answered inline, beside
the text, with its line and column and a marker under the spot (never the parser's words),
and the refused request changes nothing."""

from __future__ import annotations

import re

import pytest

from agents.runtime.models import Checkpoint, Run
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
BROKEN = '{\r\n  "item": "chair"\r\n  "qty": 3\r\n}'  # as a browser's textarea sends it


def text(response) -> str:
    return response.content.decode()


def unchanged(tenant, run) -> bool:
    with tenant_scope(tenant.pk):
        fresh = Run.objects.get(pk=run.pk)
        state = Checkpoint.objects.get(run=run).state
        audited = AuditEvent.objects.for_tenant(tenant).filter(action__startswith="run.console")
        return (
            fresh.version == run.version
            and state == {"item": "lamp", "qty": 1}
            and (not audited.exists())
        )


@pytest.mark.parametrize("headers", [{}, HX], ids=["page", "htmx"])
def test_bad_json_in_the_state_editor_shows_line_column_and_a_marker(client_for, tenant_a, headers):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/state/", {"version": run.version, "state": BROKEN}, **headers
    )
    assert response.status_code == 400
    page = text(response)
    assert '<div class="field-problems" id="state-errors" role="alert">' in page
    assert (
        "<li>Line 3, column 3: A comma (,) or a closing bracket is missing before this.</li>"
        in page
    )
    # The offending line, and a caret under the spot.
    marker = re.search(r'<pre class="json-marker"[^>]*>(.*?)</pre>', page, re.S)
    assert marker is not None
    shown = re.sub(r"<[^>]+>", "", marker.group(1)).split("\n")
    assert shown == ["3 │   &quot;qty&quot;: 3", "  │   ^"]
    assert "Expecting" not in page and "delimiter" not in page and "char 2" not in page
    assert 'aria-invalid="true" aria-describedby="state-errors"' in page
    assert "&quot;item&quot;: &quot;chair&quot;" in page  # the draft is kept for fixing
    assert unchanged(tenant_a, run)


def test_an_empty_state_is_answered_beside_the_editor_and_changes_nothing(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/state/", {"version": run.version, "state": ""}, **HX
    )
    assert response.status_code == 400
    page = text(response)
    assert '<div class="field-problems" id="state-errors" role="alert">' in page
    assert "<li>Write the state as a JSON object ({…}).</li>" in page
    assert unchanged(tenant_a, run)


def test_state_that_is_json_but_not_an_object_is_said_without_a_marker(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/state/", {"version": run.version, "state": "[1, 2]"}
    )
    assert response.status_code == 400
    page = text(response)
    assert "<li>The state must be a JSON object ({…}).</li>" in page
    assert '<pre class="json-marker"' not in page
    assert unchanged(tenant_a, run)
