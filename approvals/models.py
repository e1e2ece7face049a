"""Approval requests: a paused run waiting for a person's decision."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from tenants.models import TenantOwned


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"


class ApprovalRequest(TenantOwned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey("agents.Run", on_delete=models.CASCADE, related_name="approvals")
    checkpoint_seq = models.PositiveIntegerField()
    step = models.CharField(max_length=100)
    action = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict)
    amount = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    reason = models.TextField(blank=True)
    status = models.CharField(
        max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    due_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_by_label = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)
    edited_arguments = models.JSONField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["tenant", "status", "due_at"])]
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.action} for run {self.run_id} ({self.status})"
