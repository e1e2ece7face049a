"""The Swagger page at /api/docs/ is made of static files only: the strict CSP holds there."""

from __future__ import annotations

import re

from django.test import Client


def test_the_swagger_page_has_no_inline_style_or_script(db):
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<style" not in html and " style=" not in html
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert len(scripts) == 3
    assert all('src="' in attrs and not body.strip() for attrs, body in scripts)
    assert "/static/css/swagger.css" in html and "/static/drf_spectacular_sidecar/" in html
    assert response["Content-Security-Policy"].startswith("default-src 'self'; script-src 'self';")


def test_the_swagger_init_script_is_served_as_javascript_from_the_same_url(db):
    response = Client().get("/api/docs/?script=")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in response.content.decode()
