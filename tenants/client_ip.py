"""The client's address for login lockouts (django-axes' AXES_CLIENT_IP_CALLABLE)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def client_ip(request: Any) -> str | None:
    """REMOTE_ADDR; behind TRUSTED_PROXY_COUNT proxies, the address the outermost one saw.

    Each proxy appends the address it received the request from to X-Forwarded-For, so with
    n trusted proxies the client is the n-th entry from the right; entries further left were
    written by the client and prove nothing. A header too short or not an address means the
    proxies are not as configured, and REMOTE_ADDR is the one address nobody could forge.
    """
    remote = request.META.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [part for part in forwarded if part]
    if len(forwarded) < count or not _valid(forwarded[-count]):
        return remote
    return forwarded[-count]
