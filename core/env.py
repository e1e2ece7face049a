"""Typed readers for environment settings. A bad value stops startup with a clear message."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """The raw value, or default when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or default


def env_bool(name: str, default: bool) -> bool:
    """1/0, true/false, yes/no or on/off (any case); default when unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """An integer of at least `minimum`; default when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """A number of at least `minimum`; default when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated items, blanks dropped; default when unset (set but empty is [])."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, *, schemes: tuple[str, ...]) -> str | None:
    """A URL whose scheme is one of `schemes`, or None when unset."""
    raw = env_str(name)
    if raw is None:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in schemes or not (parsed.hostname or parsed.path):
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise ImproperlyConfigured(f"{name} must be a URL starting with {allowed}; got {raw!r}")
    return raw


def env_hosts(name: str, *, default_port: int) -> list[tuple[str, int]]:
    """Comma-separated host:port pairs (`sentinel-1:26379,sentinel-2:26379`); [] when unset."""
    hosts = []
    for item in env_list(name, []):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", str(default_port))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ImproperlyConfigured(f"{name} must list host:port pairs; got {item!r}")
        hosts.append((host, int(port)))
    return hosts
