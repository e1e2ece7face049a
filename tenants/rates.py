"""API rate limits as text ("600/min") and the buckets they apply to.

Kept free of models and Redis so the settings check, the Tenant field validator and the
throttle share one parser.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from django.core.exceptions import ValidationError

READ = "read"
WRITE = "write"
LANGGRAPH = "langgraph"
# "read": every API call a view does not put elsewhere (reads, and light writes such as
# cancelling, deciding or revoking); "write": calls that cost model money or fill storage;
# "langgraph": the checkpoints of LangGraph graphs (AgentStateSaver), counted in steps per
# tenant, not in requests per key: a request that saves five checkpoints counts five.
BUCKETS = (READ, WRITE, LANGGRAPH)
# Buckets counted for the whole tenant rather than per API key or person.
PER_TENANT = frozenset({LANGGRAPH})
OFF = "off"

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")


class Rate(NamedTuple):
    limit: int  # requests allowed per window
    window: int  # seconds

    def __str__(self) -> str:
        unit = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}[self.window]
        return f"{self.limit} per {unit}"


def parse_rate(text: str) -> Rate | None:
    """`"600/min"` → Rate(600, 60); `"off"` → None (no limit). ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("a rate is text like '600/min' or 'off'")
    if text.strip().lower() == OFF:
        return None
    match = _RATE.match(text.lower())
    unit = match.group(2) if match else ""
    if unit not in _UNITS and len(unit) > 3 and unit.endswith("s"):
        unit = unit[:-1]  # "minutes", "hours"
    if not match or unit not in _UNITS or int(match.group(1)) < 1:
        raise ValueError(f"{text!r} is not a rate like '600/min', '10/s', '1000/hour' or 'off'")
    return Rate(int(match.group(1)), _UNITS[unit])


def validate_overrides(value: Any) -> None:
    """A tenant's overrides: {"read": "1200/min", "write": "off"}, any subset of the buckets."""
    if not isinstance(value, dict):
        raise ValidationError("Rate limit overrides are an object keyed by bucket.")
    unknown = sorted(set(value) - set(BUCKETS))
    if unknown:
        raise ValidationError(
            f"Unknown rate limit buckets: {', '.join(unknown)} (known: {', '.join(BUCKETS)})."
        )
    for bucket, text in value.items():
        try:
            parse_rate(text)
        except ValueError as exc:
            raise ValidationError(f"{bucket}: {exc}") from exc
