"""Every page and endpoint that exists, for admin, manager, member, viewer and outsider.

The outsider is an admin of another tenant: the strongest role in the wrong place. Where a
URL names an object of tenant A, the outsider must get 404, never a 403 that reveals it.
"""

from __future__ import annotations

import pytest

from tenants.scope import tenant_scope
from tests import factories

ALL = {"admin": 200, "manager": 200, "member": 200, "viewer": 200}
ADMIN_ONLY = {"admin": 200, "manager": 403, "member": 403, "viewer": 403}

WEB_READS = [
    ("/", ALL),
    ("/runs/", ALL),
    ("/approvals/", ALL),
    ("/memory/", ALL),
    ("/admin/members/", ADMIN_ONLY),
    ("/admin/api-keys/", ADMIN_ONLY),
    ("/admin/audit/", ADMIN_ONLY),
]

API_READS = [
    ("/api/v1/me", ALL),
    ("/api/v1/api-keys", ADMIN_ONLY),
    ("/api/v1/members", ADMIN_ONLY),
    ("/api/v1/audit-events", ADMIN_ONLY),
]


@pytest.fixture
def objects(tenant_a, members):
    """Objects of tenant A that act-URLs name."""
    key = factories.make_api_key(tenant_a, ["read"]).key
    target = factories.make_member(tenant_a, "viewer")
    return {"key": key.pk, "membership": target.pk, "tenant": tenant_a.pk}


@pytest.mark.parametrize("url,expected", WEB_READS)
@pytest.mark.parametrize("role", ["admin", "manager", "member", "viewer"])
def test_web_pages_answer_each_role_as_its_scopes_allow(client_for, url, expected, role):
    assert client_for(role).get(url).status_code == expected[role]


@pytest.mark.parametrize("url,expected", WEB_READS)
def test_web_pages_send_anonymous_visitors_to_login(client_for, url, expected):
    response = client_for("anonymous").get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("url,expected", API_READS)
@pytest.mark.parametrize("role", ["admin", "manager", "member", "viewer"])
def test_api_reads_answer_each_role_as_its_scopes_allow(client_for, url, expected, role):
    assert client_for(role).get(url).status_code == expected[role]


@pytest.mark.parametrize("url,expected", API_READS)
def test_api_reads_refuse_anonymous_callers_with_401(client_for, url, expected):
    assert client_for("anonymous").get(url).status_code == 401


def test_the_outsider_lists_never_include_tenant_a(client_for, members, objects):
    client = client_for("outsider")
    names = {m["username"] for m in client.get("/api/v1/members").json()}
    assert not names & {m.user.username for m in members.values()}
    assert all(k["id"] != str(objects["key"]) for k in client.get("/api/v1/api-keys").json())
    page = client.get("/admin/members/").content.decode()
    assert members["admin"].user.username not in page


WEB_ACTS = [
    # (method, url template, data, status for admin)
    ("post", "/admin/api-keys/", {"name": "k", "scopes": ["read"]}, 200),
    # Without htmx revoking and the role form answer with a redirect back to the page.
    ("post", "/admin/api-keys/{key}/revoke/", {}, 302),
    ("post", "/admin/members/{membership}/role/", {"role": "manager"}, 302),
]
API_ACTS = [
    ("post", "/api/v1/api-keys", {"name": "k", "scopes": ["read"]}, 201),
    ("post", "/api/v1/api-keys/{key}/revoke", {}, 200),
    ("post", "/api/v1/members/{membership}/role", {"role": "manager"}, 200),
]


def _call(client, method, url, data, api):
    if api:
        return getattr(client, method)(url, data, content_type="application/json")
    return getattr(client, method)(url, data)


@pytest.mark.parametrize("api", [False, True], ids=["web", "api"])
@pytest.mark.parametrize("who", ["admin", "manager", "member", "viewer", "outsider"])
@pytest.mark.parametrize("index", range(3))
def test_acting_is_allowed_to_admins_forbidden_to_others_and_404_for_outsiders(
    client_for, objects, api, who, index
):
    method, template, data, admin_status = (API_ACTS if api else WEB_ACTS)[index]
    url = template.format(**objects)
    response = _call(client_for(who), method, url, data, api)
    names_an_object = "{" in template
    if who == "admin":
        assert response.status_code == admin_status
    elif who == "outsider" and names_an_object:
        assert response.status_code == 404
    elif who == "outsider":
        assert response.status_code == admin_status  # acts in its own tenant only
    else:
        assert response.status_code == 403


def test_the_outsiders_action_changes_nothing_in_tenant_a(client_for, objects, tenant_a):
    from tenants.models import ApiKey, Membership

    client_for("outsider").post(f"/api/v1/api-keys/{objects['key']}/revoke")
    client_for("outsider").post(
        f"/api/v1/members/{objects['membership']}/role",
        {"role": "admin"},
        content_type="application/json",
    )
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).get(pk=objects["key"]).revoked_at is None
        assert Membership.objects.for_tenant(tenant_a).get(pk=objects["membership"]).role == (
            "viewer"
        )


@pytest.mark.parametrize("who", ["admin", "manager", "member", "viewer"])
def test_members_may_switch_to_their_own_tenant(client_for, objects, who):
    response = client_for(who).post("/tenants/switch/", {"tenant": objects["tenant"]})
    assert response.status_code == 302


def test_switching_to_a_tenant_you_do_not_belong_to_is_404(client_for, objects):
    response = client_for("outsider").post("/tenants/switch/", {"tenant": objects["tenant"]})
    assert response.status_code == 404
