"""Bad input gets a clear error and changes nothing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.http import HttpResponse
from django.test import RequestFactory

from tenants.middleware import TenantMiddleware
from tenants.models import ApiKey, AuditEvent
from tenants.scope import tenant_scope, transaction_scope
from tests import factories
from tests.tenants.test_api_keys import api


@pytest.fixture
def admin_key(tenant_a):
    return factories.make_api_key(tenant_a, ["admin", "read"])


def test_malformed_json_gets_400_and_writes_nothing(tenant_a, admin_key):
    response = api(admin_key.raw).post(
        "/api/v1/api-keys", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).count() == 1


def test_invalid_fields_get_400_with_field_errors(tenant_a, admin_key):
    response = api(admin_key.raw).post(
        "/api/v1/api-keys", {"name": "", "scopes": ["root"]}, content_type="application/json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["fields"]) == {"name", "scopes"}


def test_demoting_the_last_admin_is_refused_with_409_and_nothing_changes(tenant_a):
    admin = factories.make_member(tenant_a, "admin")
    key = factories.make_api_key(tenant_a, ["admin"])
    # make_api_key made a second admin; demote it first so `admin` is the last one.
    with tenant_scope(tenant_a.pk):
        from tenants.models import Membership

        others = Membership.objects.for_tenant(tenant_a).exclude(pk=admin.pk)
        others.update(role="viewer")
    response = api(key.raw).post(
        f"/api/v1/members/{admin.pk}/role", {"role": "viewer"}, content_type="application/json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "last_admin"
    with tenant_scope(tenant_a.pk):
        admin.refresh_from_db()
    assert admin.role == "admin"


def test_unknown_api_paths_answer_json_404(db):
    response = api().get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_a_request_that_fails_halfway_leaves_nothing_written(tenant_a):
    member = factories.make_member(tenant_a, "admin")

    def view_that_writes_then_fails(request):
        AuditEvent.objects.create(tenant=tenant_a, actor_label="x", action="half.written")
        raise RuntimeError("boom")

    request = RequestFactory().get("/")
    request.user = member.user
    request.session = {}
    with pytest.raises(RuntimeError):
        TenantMiddleware(view_that_writes_then_fails)(request)
    with tenant_scope(tenant_a.pk):
        assert not AuditEvent.objects.for_tenant(tenant_a).filter(action="half.written").exists()


def test_a_request_runs_in_its_members_tenant_and_leaves_no_setting_behind(tenant_a):
    member = factories.make_member(tenant_a, "viewer")
    seen = {}

    def view(request):
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('app.tenant_id', true)")
            seen["tenant"] = cursor.fetchone()[0]
        return HttpResponse("ok")

    request = RequestFactory().get("/")
    request.user = member.user
    request.session = {}
    with transaction_scope():
        TenantMiddleware(view)(request)
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('app.tenant_id', true)")
            assert cursor.fetchone()[0] in ("", None)
    assert seen["tenant"] == str(tenant_a.pk)
    assert request.principal.role == "viewer"
