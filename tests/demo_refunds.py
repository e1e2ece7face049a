"""What the demo payment provider really refunded, read from its table (the provider itself
lists nothing: its rows span tenants)."""

from __future__ import annotations

from django.db import connection

COLUMNS = ["key", "customer", "amount_cents", "requests"]


def demo_refunds() -> list[dict]:
    """Every refund the provider made, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key, customer, amount_cents, requests FROM agents_demorefund"
            " ORDER BY id"
        )
        return [dict(zip(COLUMNS, row, strict=True)) for row in cursor.fetchall()]


def refund_count(key: str | None = None) -> int:
    """How many refunds were made (with this idempotency key, if given)."""
    return len([r for r in demo_refunds() if key is None or r["key"] == key])
