"""Tables of the shared plumbing: the leases that make one of several processes the active one
(core/leader.py)."""

from __future__ import annotations

from django.db import models


class LeaderLease(models.Model):
    """Who holds a role only one process may hold at a time (Celery beat), until when: the
    holder renews it, a standby takes it once it has expired. Not a tenant's row."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.holder}"
