"""The page a locked-out login gets (django-axes' AXES_LOCKOUT_CALLABLE)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """429 in the console's look; Retry-After when the lockout ends by itself."""
    cool_off = settings.AXES_COOLOFF_TIME
    minutes = int(cool_off.total_seconds() // 60) if cool_off else None
    response = render(
        request,
        "registration/lockout.html",
        {"minutes": minutes},
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
    if cool_off:
        response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
