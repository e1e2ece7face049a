"""API keys: shown once, stored hashed, scoped, revocable, and bound to their tenant."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from tenants.models import ApiKey, AuditEvent
from tenants.scope import tenant_scope
from tests import factories


def api(key: str | None = None) -> Client:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return Client(**headers)


def test_only_a_hash_of_the_key_is_stored(tenant_a):
    created = factories.make_api_key(tenant_a)
    with tenant_scope(tenant_a.pk):
        stored = ApiKey.objects.for_tenant(tenant_a).get()
    assert created.raw not in json.dumps(
        {f.attname: str(getattr(stored, f.attname)) for f in ApiKey._meta.fields}
    )
    assert stored.prefix in created.raw and len(stored.key_hash) == 64


def test_a_valid_key_authenticates_as_its_tenant_and_records_last_use(
    tenant_a, django_capture_on_commit_callbacks
):
    created = factories.make_api_key(tenant_a, ["read"])
    with django_capture_on_commit_callbacks(execute=True):  # the use is written after commit
        response = api(created.raw).get("/api/v1/me")
    assert response.status_code == 200, response.content
    assert response.json()["tenant"]["slug"] == "acme-test"
    assert response.json()["scopes"] == ["read"]
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).get().last_used_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_get_with_a_key_writes_nothing_in_its_own_transaction_and_records_the_use_after(
    tenant_a,
):
    """The request's transaction only reads (it could run on a replica); the key's last use
    is written after it commits, in a transaction of its own."""
    created = factories.make_api_key(tenant_a, ["read"])
    seen: list[tuple[str, int | None]] = []

    def spy(execute, sql, params, many, context):
        blocks = connection.atomic_blocks
        seen.append((sql, id(blocks[0]) if blocks else None))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        assert api(created.raw).get("/api/v1/runs").status_code == 200
    request_txn = next(txn for sql, txn in seen if 'FROM "agents_run"' in sql)
    [(update, txn)] = [(sql, txn) for sql, txn in seen if sql.startswith("UPDATE")]
    assert "last_used_at" in update and txn is not None and txn != request_txn
    writes = [sql for sql, txn in seen if txn == request_txn and not sql.startswith("SELECT")]
    assert all("set_config" in sql or sql.startswith(("SET ", "WITH")) for sql in writes), writes
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).get().last_used_at is not None


@pytest.mark.parametrize(
    "header",
    ["", "Bearer", "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer ak_zz_secret"],
)
def test_a_missing_or_malformed_key_gets_401_with_a_json_error(db, header):
    client = Client(HTTP_AUTHORIZATION=header) if header else Client()
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"
    assert response.json()["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_key_gets_401(tenant_a):
    created = factories.make_api_key(tenant_a)
    with tenant_scope(tenant_a.pk):
        ApiKey.objects.for_tenant(tenant_a).update(revoked_at="2026-01-01T00:00Z")
    assert api(created.raw).get("/api/v1/me").status_code == 401


def test_a_key_relabelled_with_another_tenant_id_gets_401(tenant_a, tenant_b):
    created = factories.make_api_key(tenant_a)
    forged = created.raw.replace(tenant_a.pk.hex, tenant_b.pk.hex)
    assert api(forged).get("/api/v1/me").status_code == 401


def test_a_read_only_key_cannot_act(tenant_a):
    created = factories.make_api_key(tenant_a, ["read"])
    response = api(created.raw).post(
        "/api/v1/api-keys", {"name": "x", "scopes": ["read"]}, content_type="application/json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_an_admin_key_creates_a_key_that_is_shown_once(tenant_a):
    admin_key = factories.make_api_key(tenant_a, ["admin", "read"])
    response = api(admin_key.raw).post(
        "/api/v1/api-keys",
        {"name": "bot", "scopes": ["read", "approve"]},
        content_type="application/json",
    )
    assert response.status_code == 201
    raw = response.json()["key"]
    assert raw.startswith(f"ak_{tenant_a.pk.hex}_")
    listing = api(admin_key.raw).get("/api/v1/api-keys").json()
    assert all("key" not in item for item in listing)
    assert api(raw).get("/api/v1/me").json()["scopes"] == ["approve", "read"]


def test_revoking_twice_answers_409_the_second_time(tenant_a):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    victim = factories.make_api_key(tenant_a, ["read"])
    url = f"/api/v1/api-keys/{victim.key.pk}/revoke"
    assert api(admin_key.raw).post(url).status_code == 200
    second = api(admin_key.raw).post(url)
    assert second.status_code == 409
    assert second.json()["code"] == "api_key_revoked"
    assert api(victim.raw).get("/api/v1/me").status_code == 401


def test_another_tenants_key_id_is_404_not_403(tenant_a, tenant_b):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    foreign = factories.make_api_key(tenant_b, ["read"])
    response = api(admin_key.raw).post(f"/api/v1/api-keys/{foreign.key.pk}/revoke")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert api(foreign.raw).get("/api/v1/me").status_code == 200


# --- expiry ---------------------------------------------------------------------------------------


def _create(admin_raw: str, **extra):
    return api(admin_raw).post(
        "/api/v1/api-keys",
        {"name": "bot", "scopes": ["read"], **extra},
        content_type="application/json",
    )


def test_a_key_made_through_the_api_may_expire_in_some_days(tenant_a):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    response = _create(admin_key.raw, expires_in_days=30)
    assert response.status_code == 201, response.json()
    expires_at = datetime.fromisoformat(response.json()["expires_at"])
    expected = timezone.now() + timedelta(days=30)
    assert abs((expires_at - expected).total_seconds()) < 60
    assert api(response.json()["key"]).get("/api/v1/me").status_code == 200


def test_a_key_without_an_expiry_never_expires(tenant_a):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    for extra in ({}, {"expires_in_days": None}):
        response = _create(admin_key.raw, **extra)
        assert response.status_code == 201 and response.json()["expires_at"] is None


@pytest.mark.parametrize("days", [0, -1, 3651, "soon", 1.5])
def test_an_expiry_outside_one_to_3650_days_is_refused_and_creates_nothing(tenant_a, days):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    response = _create(admin_key.raw, expires_in_days=days)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert set(response.json()["fields"]) == {"expires_in_days"}
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).count() == 1  # the admin's own key


def test_an_expired_key_gets_401_saying_so(tenant_a):
    created = factories.make_api_key(tenant_a, ["read"])
    with tenant_scope(tenant_a.pk):
        ApiKey.objects.for_tenant(tenant_a).filter(pk=created.key.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    response = api(created.raw).get("/api/v1/me")
    assert response.status_code == 401
    assert response.json() == {"code": "unauthenticated", "message": "The API key has expired."}
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_console_form_sets_an_expiry_or_none(client_for, tenant_a):
    admin = client_for("admin")
    assert (
        admin.post(
            "/admin/api-keys/", {"name": "ci", "scopes": ["read"], "expires_in_days": "7"}
        ).status_code
        == 200
    )
    assert admin.post("/admin/api-keys/", {"name": "forever", "scopes": ["read"]}).status_code == (
        200
    )
    with tenant_scope(tenant_a.pk):
        keys = {k.name: k for k in ApiKey.objects.for_tenant(tenant_a)}
    expected = timezone.now() + timedelta(days=7)
    assert abs((keys["ci"].expires_at - expected).total_seconds()) < 60
    assert keys["forever"].expires_at is None


@pytest.mark.parametrize("days", ["0", "3651", "soon"])
def test_the_console_form_refuses_a_bad_expiry(client_for, tenant_a, days):
    response = client_for("admin").post(
        "/admin/api-keys/", {"name": "ci", "scopes": ["read"], "expires_in_days": days}
    )
    assert response.status_code == 400
    assert 'id="expires-error"' in response.content.decode()
    with tenant_scope(tenant_a.pk):
        assert not ApiKey.objects.for_tenant(tenant_a).filter(name="ci").exists()


def test_the_keys_page_shows_the_expiry_and_marks_expired_keys(client_for, tenant_a):
    live = factories.make_api_key(tenant_a, ["read"])
    dead = factories.make_api_key(tenant_a, ["read"])
    later = timezone.now() + timedelta(days=10)
    with tenant_scope(tenant_a.pk):
        ApiKey.objects.for_tenant(tenant_a).filter(pk=live.key.pk).update(expires_at=later)
        ApiKey.objects.for_tenant(tenant_a).filter(pk=dead.key.pk).update(
            expires_at=timezone.now() - timedelta(days=1)
        )
    html = client_for("admin").get("/admin/api-keys/").content.decode()
    live_row = html.split(f'id="key-{live.key.pk}"', 1)[1].split("</tr>", 1)[0]
    dead_row = html.split(f'id="key-{dead.key.pk}"', 1)[1].split("</tr>", 1)[0]
    assert later.strftime("%Y-%m-%d") in live_row and "expired" not in live_row
    assert "expired" in dead_row and "Revoke" in dead_row


def test_the_expiry_is_audited_at_creation(tenant_a):
    admin_key = factories.make_api_key(tenant_a, ["admin"])
    response = _create(admin_key.raw, expires_in_days=5)
    with tenant_scope(tenant_a.pk):
        event = AuditEvent.objects.for_tenant(tenant_a).filter(action="api_key.created").first()
    recorded = datetime.fromisoformat(event.after["expires_at"])
    assert recorded == datetime.fromisoformat(response.json()["expires_at"])
