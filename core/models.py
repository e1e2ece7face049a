"""Tables of the shared plumbing: the API's idempotency records, and the leases that make one
of several processes the active one (core/leader.py)."""

from __future__ import annotations

from django.db import models

from tenants.models import TenantOwned


class IdempotencyStatus(models.TextChoices):
    STARTED = "started", "Started"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class IdempotencyRecord(TenantOwned):
    """A POST to our API remembered by its Idempotency-Key (Stripe's semantics)."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=IdempotencyStatus.choices)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        # Moved from the agents app without touching the database: the table, its indexes
        # and its row-level-security policy keep the names they were created with.
        db_table = "agents_idempotencyrecord"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key")
        ]
        indexes = [models.Index(fields=["expires_at"], name="agents_idem_expires_7d5795_idx")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class LeaderLease(models.Model):
    """Who holds a role only one process may hold at a time (Celery beat), until when: the
    holder renews it, a standby takes it once it has expired. Not a tenant's row."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.holder}"
