"""Tenants, who belongs to them, how integrations authenticate, and what happened."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from tenants.rates import validate_overrides


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MANAGER = "manager", "Manager"
    MEMBER = "member", "Member"  # an end user of the tenant's agents
    VIEWER = "viewer", "Viewer"


class Scope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Start runs, send messages and events"
    APPROVE = "approve", "Decide approvals"
    ADMIN = "admin", "Administer the tenant"


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    # Retention defaults that the sweeps of later issues enforce; None means keep forever.
    session_cache_ttl_seconds = models.PositiveIntegerField(default=3600)
    checkpoint_retention_days = models.PositiveIntegerField(null=True, blank=True, default=7)
    conversation_retention_days = models.PositiveIntegerField(null=True, blank=True, default=90)
    memory_retention_days = models.PositiveIntegerField(null=True, blank=True, default=None)
    audit_retention_days = models.PositiveIntegerField(null=True, blank=True, default=365)
    # API rate limits that replace the settings' for this tenant, e.g. {"write": "10/min"}.
    api_rate_limits = models.JSONField(default=dict, blank=True, validators=[validate_overrides])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TenantQuerySet(models.QuerySet):
    def for_tenant(self, tenant: Tenant | uuid.UUID | str) -> TenantQuerySet:
        tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
        return self.filter(tenant_id=tenant_id)


class TenantOwned(models.Model):
    """Base of every tenant-owned table: scoped in the ORM and by row-level security."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    objects = TenantQuerySet.as_manager()

    class Meta:
        abstract = True


class Membership(TenantOwned):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")
        ]
        indexes = [models.Index(fields=["tenant", "role"])]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant_id} as {self.role}"


class ApiKey(TenantOwned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)  # shown in lists so people can tell keys apart
    key_hash = models.CharField(max_length=64, unique=True)  # sha256 of the whole key
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # None: never
    # Set for a person's own MCP token (tenants/personal_tokens.py): it reaches only this
    # person's memories, only at /mcp, and only while they are a member. None: an
    # integration's key, acting for the whole tenant.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="personal_tokens",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "user"], name="apikey_personal")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()


class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE, and DELETE outside a system context."""

    id = models.BigAutoField(primary_key=True)
    # Null only for events of the system context that span tenants.
    tenant = models.ForeignKey(
        Tenant, null=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=100, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="audit_tenant_recent"),
            models.Index(fields=["tenant", "target_type", "target_id"], name="audit_target"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"


class Invitation(TenantOwned):
    """An email invited to join the tenant with a role, by a one-time link.

    Only a SHA-256 of the link's token is stored. Sending it again puts a new token in place,
    so the link sent before stops working. Open: neither accepted nor revoked (it may have
    expired); at most one open invitation per tenant and address.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    email = models.EmailField()  # stored lower-case
    role = models.CharField(max_length=16, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "email"],
                condition=models.Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_one_open_per_email",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} as {self.role}"

    @property
    def is_open(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class SsoIdentity(models.Model):
    """The account an OpenID Connect subject signs in as. Not tenant-owned: a person's login."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


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
        # Moved from the agents app, then core, without touching the database: the table, its
        # indexes and its row-level-security policy keep the names they were created with.
        db_table = "agents_idempotencyrecord"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key")
        ]
        indexes = [models.Index(fields=["expires_at"], name="agents_idem_expires_7d5795_idx")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"
