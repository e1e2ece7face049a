"""The demo payments provider's ledger: an external system the refund desk pays through, so
not tenant-owned. Its table keeps the name it had in the runtime (`agents_demorefund`)."""

from __future__ import annotations

from django.db import models


class DemoRefund(models.Model):
    """One refund the provider was asked for, once per idempotency key (`requests` counts the
    asks: more than one means a retry reached the provider, which the key made harmless)."""

    id = models.BigAutoField(primary_key=True)
    idempotency_key = models.CharField(max_length=255, unique=True)
    customer = models.CharField(max_length=100)
    amount_cents = models.PositiveIntegerField()
    requests = models.PositiveIntegerField(default=1)  # how many times it was asked
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "agents_demorefund"

    def __str__(self) -> str:
        return f"refund {self.amount_cents / 100:.2f} to {self.customer}"
