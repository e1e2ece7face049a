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


def _settings_in_a_new_process(env: dict[str, str], expression: str) -> str:
    import os
    import subprocess
    import sys

    from django.conf import settings

    base = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": settings.DATABASE_URL,
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "x" * 50,
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import django; django.setup(); from django.conf import settings; print({expression})",
        ],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_the_content_security_policy_lets_pages_connect_only_to_their_own_origin(db):
    policy = Client().get("/login/")["Content-Security-Policy"]
    assert "connect-src 'self';" in policy
    assert "ws:" not in policy and "wss:" not in policy


def test_the_proxy_ssl_header_is_trusted_only_when_configured(db, settings):
    assert not getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    response = Client().get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response.wsgi_request.is_secure() is False
    trusted = _settings_in_a_new_process(
        {"TRUST_X_FORWARDED_PROTO": "1"}, "settings.SECURE_PROXY_SSL_HEADER"
    )
    assert trusted == "('HTTP_X_FORWARDED_PROTO', 'https')"


def test_websocket_origins_come_from_the_trusted_origins_and_hosts_without_wildcards():
    origins = _settings_in_a_new_process(
        {
            "ALLOWED_HOSTS": "*,.example.com,agents.example.com",
            "CSRF_TRUSTED_ORIGINS": "https://agents.example.com,https://*.example.org",
        },
        "settings.WEBSOCKET_ALLOWED_ORIGINS",
    )
    assert origins == "['https://agents.example.com', 'agents.example.com']"
