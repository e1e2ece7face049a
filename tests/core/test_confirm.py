"""One way to ask before a destructive action (core/confirm.py, and the members and API keys
pages of tenants/ in the same shape): a question inside the page with htmx, a page of its own
without JavaScript, never `window.confirm()`.

The memory page's delete has tests/memory/test_privacy_search.py; the browser side
tests/e2e/test_privacy.py and tests/e2e/test_console_basics.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.runtime.models import Run
from tenants.models import ApiKey
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
HX = {"HTTP_HX_REQUEST": "true"}
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode()).strip()


def test_no_template_or_script_of_ours_asks_with_the_browsers_confirm_dialog():
    files = [*ROOT.glob("templates/**/*.html"), *ROOT.glob("static/**/*.js")]
    ours = [f for f in files if "vendor" not in f.parts and "drf_spectacular" not in str(f)]
    assert len(ours) > 20
    offenders = [
        str(f.relative_to(ROOT))
        for f in ours
        if re.search(r"hx-confirm|\bconfirm\(", f.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def slot_of(html: str) -> str:
    return re.search(r'id="(confirm-[0-9a-f]{12})"', html).group(1)


# --- cancelling a run from its page ---------------------------------------------------------------


@pytest.fixture
def running(tenant_a, members):
    return make_run(
        tenant_a,
        status="running",
        lease_owner="w:1",
        lease_expires_at=ago(-60),
        created_by=members["member"].user,
    )


def test_the_run_page_offers_cancel_as_a_link_that_asks_first(client_for, running):
    page = text(client_for("admin").get(f"/runs/{running.pk}/"))
    url = f"/runs/{running.pk}/cancel/"
    assert re.search(
        rf'<a class="button danger confirm-trigger" id="confirm-[0-9a-f]+" href="{url}" '
        rf'hx-get="{url}" hx-target="this" hx-swap="outerHTML">Cancel run</a>',
        page,
    )


def test_asking_to_cancel_a_run_answers_the_question_in_the_page(client_for, running, tenant_a):
    url = f"/runs/{running.pk}/cancel/"
    question = text(client_for("admin").get(url, **HX))
    slot = slot_of(question)
    assert question.startswith(f'<div class="confirm" id="{slot}" role="group"')
    assert (
        ">Cancel this run?</span>" in question and "A step in progress finishes first" in question
    )
    assert f'hx-post="{url}" hx-target="#run-live"' in question
    assert 'name="csrfmiddlewaretoken"' in question
    assert re.search(r'<a class="button"[^>]*autofocus>Keep it running</a>', question)
    back = text(client_for("admin").get(url + "?keep=1", **HX))
    assert back.startswith(f'<a class="button danger confirm-trigger" id="{slot}"')
    with tenant_scope(tenant_a.pk):
        assert Run.objects.get(pk=running.pk).status == "running"  # asking changes nothing


def test_without_javascript_cancel_asks_on_a_page_then_cancels(client_for, running, tenant_a):
    client = client_for("admin")
    url = f"/runs/{running.pk}/cancel/"
    page = text(client.get(url))
    assert '<h1 id="confirm-heading">Cancel this run?</h1>' in page
    assert f'<form method="post" action="{url}">' in page
    assert f'<a class="button" href="/runs/{running.pk}/">Keep it running</a>' in page
    assert client.get(url + "?keep=1")["Location"] == f"/runs/{running.pk}/"
    assert client.post(url).status_code == 302
    with tenant_scope(tenant_a.pk):
        assert Run.objects.get(pk=running.pk).cancel_requested


ASK_CANCEL = {"admin": 200, "manager": 200, "member": 200, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_the_cancel_question_follows_the_cancel_permissions(client_for, running, who):
    # The member started the run; viewers may not cancel; another tenant's run does not exist.
    assert client_for(who).get(f"/runs/{running.pk}/cancel/", **HX).status_code == ASK_CANCEL[who]


def test_a_member_is_not_asked_about_another_members_run(client_for, tenant_a):
    run = make_run(tenant_a, status="running", created_by=factories.make_user())
    assert client_for("member").get(f"/runs/{run.pk}/cancel/").status_code == 404


# --- the console's force-release and cancel -------------------------------------------------------


@pytest.mark.parametrize(
    "action,label,question,button",
    [
        (
            "release",
            "Force-release lease",
            "Take the run away from its worker?",
            "Force-release lease",
        ),
        ("cancel", "Cancel", "Cancel this run?", "Cancel run"),
    ],
)
def test_the_consoles_dangerous_actions_ask_about_the_version_the_page_showed(
    client_for, running, action, label, question, button
):
    client = client_for("admin")
    page = text(client.get(f"/console/runs/{running.pk}/"))
    ask = f"/console/runs/{running.pk}/{action}/confirm/?version={running.version}&amp;seen=0"
    assert f'href="{ask}" hx-get="{ask}" hx-target="this" hx-swap="outerHTML">{label}</a>' in page
    answer = text(
        client.get(
            f"/console/runs/{running.pk}/{action}/confirm/",
            {"version": running.version, "seen": "0"},
            **HX,
        )
    )
    assert f">{question}</span>" in answer
    assert f'hx-post="/console/runs/{running.pk}/{action}/" hx-target="#console-run"' in answer
    assert f'<input type="hidden" name="version" value="{running.version}">' in answer
    assert '<input type="hidden" name="seen" value="0">' in answer
    assert f'<button type="submit" class="danger">{button}</button>' in answer


def test_a_console_question_about_an_old_version_posts_that_version_and_is_refused(
    client_for, running, tenant_a
):
    client = client_for("admin")
    with tenant_scope(tenant_a.pk):
        Run.objects.filter(pk=running.pk).update(version=running.version + 1)
    answer = text(
        client.get(
            f"/console/runs/{running.pk}/cancel/confirm/", {"version": running.version}, **HX
        )
    )
    assert f'name="version" value="{running.version}"' in answer  # what the admin saw
    refused = client.post(f"/console/runs/{running.pk}/cancel/", {"version": running.version})
    assert refused.status_code == 409


def test_the_console_asks_on_a_page_without_javascript(client_for, running):
    page = text(client_for("admin").get(f"/console/runs/{running.pk}/release/confirm/?version=1"))
    assert '<h1 id="confirm-heading">Take the run away from its worker?</h1>' in page
    assert f'<form method="post" action="/console/runs/{running.pk}/release/">' in page
    assert f'<a class="button" href="/console/runs/{running.pk}/">Keep the lease</a>' in page


@pytest.mark.parametrize("action", ["resume", "resolve", "nonsense"])
def test_only_the_dangerous_console_actions_have_a_question(client_for, running, action):
    assert (
        client_for("admin").get(f"/console/runs/{running.pk}/{action}/confirm/").status_code == 404
    )


ASK_CONSOLE = {"admin": 200, "manager": 403, "member": 403, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_only_the_tenants_admins_are_asked_about_console_actions(client_for, running, who):
    response = client_for(who).get(f"/console/runs/{running.pk}/cancel/confirm/", **HX)
    assert response.status_code == ASK_CONSOLE[who]


# --- revoking an API key --------------------------------------------------------------------------


@pytest.fixture
def key(tenant_a):
    return factories.make_api_key(tenant_a, ["read"]).key


def test_revoking_a_key_asks_in_its_row_with_cancel_focused(client_for, key, tenant_a):
    client = client_for("admin")
    page = text(client.get("/admin/api-keys/"))
    url = f"/admin/api-keys/{key.pk}/revoke/"
    assert f'<a class="button danger" href="{url}" hx-get="{url}"' in page
    row = text(client.get(url, **HX))
    assert row.startswith(f'<tr id="key-{key.pk}"') and f">Revoke {key.name}?</span>" in row
    assert re.search(r'<a class="button"[^>]*autofocus>Cancel</a>', row)
    assert f'hx-post="{url}"' in row and "hx-confirm" not in row
    back = text(client.get(url + "?keep=1", **HX))
    assert "confirm" not in back.replace("confirm-", "") and "autofocus>Revoke" in back
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).get(pk=key.pk).revoked_at is None
    assert "revoked" in text(client.post(url, **HX))


def test_without_javascript_revoking_a_key_asks_on_a_page_and_says_what_happened(
    client_for, key, tenant_a
):
    client = client_for("admin")
    url = f"/admin/api-keys/{key.pk}/revoke/"
    page = text(client.get(url))
    assert f'<h2 id="confirm-heading">Revoke {key.name}?</h2>' in page
    assert f'<form method="post" action="{url}">' in page
    done = client.post(url)
    assert done.status_code == 302 and done["Location"] == "/admin/api-keys/"
    assert f"{key.name} was revoked." in text(client.get("/admin/api-keys/"))


ASK_REVOKE = {"admin": 200, "manager": 403, "member": 403, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_only_the_tenants_admins_are_asked_about_revoking_a_key(client_for, key, who):
    response = client_for(who).get(f"/admin/api-keys/{key.pk}/revoke/", **HX)
    assert response.status_code == ASK_REVOKE[who]
