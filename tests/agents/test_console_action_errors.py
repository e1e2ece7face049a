"""The console's actions say no in words: a refused input names its field by its label (never
the form's field name), and one the page itself sends asks for a reload; nothing changes."""

from __future__ import annotations

import re

import pytest

from agents.runtime.models import Run
from tenants.scope import tenant_scope
from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def alert(response) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', response.content.decode())
    return found.group(1) if found else ""


def test_an_action_without_the_runs_version_asks_for_a_reload(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(f"/console/runs/{run.pk}/resolve/", {"note": "x"}, **HX)
    assert response.status_code == 400
    assert alert(response) == (
        "This page did not say which version of the run it showed: reload it and try again."
    )
    with tenant_scope(tenant_a.pk):
        assert Run.objects.get(pk=run.pk).resolved_at is None


def test_a_replay_from_a_bad_checkpoint_number_names_the_field_by_its_label(client_for, tenant_a):
    run = make_run(tenant_a, status="failed")
    response = client_for("admin").post(
        f"/console/runs/{run.pk}/replay/", {"version": run.version, "seq": "-1", "mode": "new"}
    )
    assert response.status_code == 400
    assert alert(response).startswith("From checkpoint: ")
    assert "seq:" not in response.content.decode()
    with tenant_scope(tenant_a.pk):
        assert Run.objects.filter(tenant=tenant_a).count() == 1
