"""Approval requests (a paused run waiting for a person), the tenant's policies for them, and
the named groups a policy may ask."""

from __future__ import annotations

import datetime as dt
import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Coalesce

from tenants.models import TenantOwned

ANY_ACTION = "*"  # the policy for every action that has no policy of its own
# The inbox sorts requests without a deadline after every deadline.
NO_DEADLINE = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"


class ApproverRole(models.TextChoices):
    MANAGER = "manager", "Managers and admins"
    ADMIN = "admin", "Admins only"


class OnExpiry(models.TextChoices):
    WAIT = "wait", "Keep waiting"
    REJECT = "reject", "Reject automatically"
    ESCALATE = "escalate", "Escalate to admins"


class ApproverGroup(TenantOwned):
    """A named set of people a policy may require the approver to belong to (e.g. Finance)."""

    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="approver_group_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class ApproverGroupMember(TenantOwned):
    group = models.ForeignKey(
        ApproverGroup,
        on_delete=models.CASCADE,
        related_name="members",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "user", "tenant"], name="approver_group_unique_member"
            )
        ]
        indexes = [models.Index(fields=["tenant", "user"], name="approver_group_member_user")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.group_id}"


class ApprovalPolicy(TenantOwned):
    """How one action of the tenant's agents is approved: when, by whom, until when."""

    action = models.CharField(max_length=100)  # a tool name, or ANY_ACTION
    # None: every request needs a decision; else only amounts above this (or with no amount).
    amount_threshold = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    approver_role = models.CharField(
        max_length=16, choices=ApproverRole.choices, default=ApproverRole.MANAGER
    )
    approver_group = models.ForeignKey(
        ApproverGroup,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="policies",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    four_eyes = models.BooleanField(default=False)  # whoever started the run may not approve
    expires_after_minutes = models.PositiveIntegerField(null=True, blank=True)
    on_expiry = models.CharField(max_length=16, choices=OnExpiry.choices, default=OnExpiry.WAIT)
    version = models.PositiveIntegerField(default=1)
    updated_by_label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["action"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "action"], name="approval_policy_unique")
        ]

    def __str__(self) -> str:
        return f"policy for {self.action}"

    @property
    def applies_to_every_action(self) -> bool:
        return self.action == ANY_ACTION


class ApprovalRequest(TenantOwned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        "agents.Run",
        on_delete=models.CASCADE,
        related_name="approvals",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
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
    # The inbox's sort key: NULL-free, so (due_sort, requested_at, id) is one keyset cursor
    # that the index below serves with a single range scan.
    due_sort = models.GeneratedField(
        expression=Coalesce("due_at", models.Value(NO_DEADLINE)),
        output_field=models.DateTimeField(),
        db_persist=True,
    )
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
    # The rules in force, copied from the policy when the request was made: editing a policy
    # later does not change who may decide a request that is already waiting.
    policy = models.ForeignKey(
        ApprovalPolicy,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    approver_role = models.CharField(
        max_length=16, choices=ApproverRole.choices, default=ApproverRole.MANAGER
    )
    approver_group = models.ForeignKey(
        ApproverGroup,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    approver_group_name = models.CharField(max_length=100, blank=True)
    four_eyes = models.BooleanField(default=False)
    on_expiry = models.CharField(max_length=16, choices=OnExpiry.choices, default=OnExpiry.WAIT)
    started_by = models.ForeignKey(  # who started the run (the four-eyes rule excludes them)
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    started_by_label = models.CharField(max_length=200, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The inbox: a tenant's pending requests by deadline (none last), keyset-paged.
            models.Index(
                fields=["tenant", "due_sort", "requested_at", "id"],
                name="approval_inbox_pending",
                condition=models.Q(status="pending"),
            ),
            # History views: one status, newest first.
            models.Index(
                fields=["tenant", "status", "-requested_at", "-id"], name="approval_history"
            ),
            # The beat sweep across tenants: pending requests whose deadline passed.
            models.Index(
                fields=["due_at"],
                name="approval_due",
                condition=models.Q(status="pending", due_at__isnull=False),
            ),
        ]
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.action} for run {self.run_id} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING
