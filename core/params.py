"""Reading numbers from query strings and forms without surprises."""

from __future__ import annotations

from typing import Any

MAX_BIGINT = 2**63 - 1


def positive_int(raw: Any, *, maximum: int = MAX_BIGINT) -> int | None:
    """The positive integer written in `raw`, or None.

    ASCII digits only: str.isdigit() also accepts "\u00b2", which int() refuses; and a value
    past `maximum` (PostgreSQL's bigint by default) cannot name a row."""
    if not isinstance(raw, str) or not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        return None
    value = int(raw)
    return value if 0 < value <= maximum else None
