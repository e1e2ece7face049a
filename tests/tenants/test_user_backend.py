"""The sign-in backend reads a signed-in user as Django's ModelBackend does, in one statement,
and sessions made through Django's ModelBackend before it stay signed in."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.forms.models import model_to_dict
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tenants.auth import backends
from tenants.auth.backends import UserBackend
from tenants.auth.sessions import SessionStore
from tenants.models import Role
from tests import factories


def test_sign_in_goes_through_our_backend_and_not_djangos_twice():
    assert backends.PATH in settings.AUTHENTICATION_BACKENDS
    assert backends.LEGACY_PATH not in settings.AUTHENTICATION_BACKENDS


def test_a_user_reads_back_field_for_field_as_modelbackend_reads_them(db):
    user = factories.make_user()
    user.first_name, user.email = "Ada", "ada@example.com"
    user.save()
    with CaptureQueriesContext(connection) as statements:
        ours = UserBackend().get_user(user.pk)
    djangos = ModelBackend().get_user(user.pk)
    assert len(statements.captured_queries) == 1
    assert model_to_dict(ours) == model_to_dict(djangos)
    assert (ours.last_login, ours.date_joined, ours.password) == (
        djangos.last_login,
        djangos.date_joined,
        djangos.password,
    )
    assert not ours._state.adding and ours._state.db == "default"
    assert ours.get_session_auth_hash() == djangos.get_session_auth_hash()


def test_an_inactive_unknown_or_malformed_user_id_is_nobody(db):
    inactive = factories.make_user()
    inactive.is_active = False
    inactive.save()
    backend = UserBackend()
    assert backend.get_user(inactive.pk) is None
    assert backend.get_user(10**9) is None
    assert backend.get_user("not-a-number") is None


def test_a_password_signs_in_through_the_login_form(db):
    tenant = factories.make_tenant()
    member = factories.make_member(tenant, Role.MANAGER)
    client = Client()
    page = client.get("/login/")
    assert page.status_code == 200
    response = client.post(
        "/login/", {"username": member.user.username, "password": factories.PASSWORD}
    )
    assert response.status_code == 302
    assert client.session[BACKEND_SESSION_KEY] == backends.PATH
    assert client.get("/runs/").status_code == 200


def test_a_session_made_through_djangos_modelbackend_stays_signed_in(db):
    tenant = factories.make_tenant()
    member = factories.make_member(tenant, Role.MANAGER)
    old = SessionStore()
    old[SESSION_KEY] = str(member.user.pk)
    old[BACKEND_SESSION_KEY] = backends.LEGACY_PATH
    old[HASH_SESSION_KEY] = member.user.get_session_auth_hash()
    old.create()
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = old.session_key
    response = client.get("/runs/")
    assert response.status_code == 200
    assert response.wsgi_request.user == member.user


def test_a_session_whose_password_changed_is_signed_out(db):
    tenant = factories.make_tenant()
    member = factories.make_member(tenant, Role.MANAGER)
    client = Client()
    client.force_login(member.user, backend=backends.PATH)
    assert client.get("/runs/").status_code == 200
    member.user.set_password("a-new-long-password-42")
    member.user.save()
    assert client.get("/runs/").status_code == 302
