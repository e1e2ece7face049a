"""Security headers and cookie settings."""

from __future__ import annotations

from django.test import Client, override_settings


def test_every_page_sends_a_content_security_policy_without_inline_script(db):
    response = Client().get("/login/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_pages_contain_no_inline_script(db):
    html = Client().get("/login/").content.decode()
    assert "<script>" not in html and "onclick=" not in html


def test_forms_are_protected_by_csrf(db):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403


@override_settings(SECURE_HSTS_SECONDS=31536000, SECURE_SSL_REDIRECT=False)
def test_hsts_is_sent_over_https_outside_debug(db):
    response = Client().get("/login/", secure=True)
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")


def test_session_and_csrf_cookies_are_secure_outside_debug(settings):
    assert settings.DEBUG is False
    assert settings.SESSION_COOKIE_SECURE and settings.CSRF_COOKIE_SECURE
    assert settings.SESSION_COOKIE_HTTPONLY


def test_the_openapi_schema_and_docs_are_served_without_a_cdn(db):
    schema = Client().get("/api/schema/")
    assert schema.status_code == 200
    docs = Client().get("/api/docs/").content.decode()
    assert "cdn" not in docs.lower() and "jsdelivr" not in docs
