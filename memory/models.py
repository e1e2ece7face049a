"""Long-term memory: facts about one end user (the subject), per-category policies, settings.

A fact's history is its lineage: every version shares `lineage`; the live version has
`valid_until` NULL, older versions point at their successor through `superseded_by`. Deleting
a fact deletes its whole lineage, so nothing of it lingers.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from pgvector.django import VectorField

from memory.facts import values
from tenants.models import Tenant, TenantOwned


class Category(models.TextChoices):
    """The built-in categories; a tenant adds its own by writing a policy for them."""

    PREFERENCE = "preference", "Preferences"
    PROFILE = "profile", "About you"
    TASK_OUTCOME = "task_outcome", "Outcomes of past requests"
    NOTE = "note", "Other notes"


class SourceKind(models.TextChoices):
    CONVERSATION = "conversation", "Learned in a conversation"
    USER = "user", "Entered by you"
    API = "api", "Added by an integration"


class MemoryFact(TenantOwned):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The (tenant, subject, ...) B-tree below leads with the tenant; no separate index.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    subject = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    lineage = models.UUIDField(default=uuid.uuid4)
    category = models.CharField(max_length=40)
    key = models.CharField(max_length=100, blank=True)  # a stable slot, e.g. contact.channel
    text = models.TextField()  # for a `value`, the text derived from it (memory/facts/values.py)
    # A JSON object kept exactly as an integration gave it (the LangGraph store's items);
    # None for a fact that is its text.
    value = models.JSONField(null=True, blank=True)
    normalized = models.TextField()  # lowercased, spaces squeezed: the dedupe key
    embedding = VectorField(null=True, blank=True)  # dimension from the model that made it
    embedding_model = models.CharField(max_length=200, blank=True)
    source_kind = models.CharField(max_length=20, choices=SourceKind.choices)
    source_session_id = models.UUIDField(null=True, blank=True)
    source_run_id = models.UUIDField(null=True, blank=True)
    source_message_seq = models.PositiveIntegerField(null=True, blank=True)
    confidence = models.FloatField(default=1.0)
    pinned = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    valid_from = models.DateTimeField()
    # When what the fact says happened or was said (its source message's time, or a date the
    # writer gave); retrieval weighs it for questions about time. None: when it was learned.
    occurred_at = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,  # with the tenant: tenants/distribution.py
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    # The writer's own time to live (LangGraph's `ttl`), in minutes: the fact expires that
    # long after it was written or (refresh_ttl) last read, and never later than its
    # category's policy allows.
    ttl_minutes = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            # Filter first: every per-user read starts here, then ranks the few rows exactly.
            models.Index(fields=["tenant", "subject", "category"], name="memfact_subject"),
            models.Index(fields=["lineage"], name="memfact_lineage"),
            models.Index(
                fields=["expires_at"],
                name="memfact_expiry",
                condition=models.Q(expires_at__isnull=False),
            ),
            models.Index(
                fields=["embedding_model"],
                name="memfact_unembedded",
                condition=models.Q(valid_until__isnull=True, embedding__isnull=True),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "subject", "key"],
                condition=models.Q(valid_until__isnull=True) & ~models.Q(key=""),
                name="memfact_one_live_per_key",
            ),
        ]

    def __str__(self) -> str:
        return f"[{self.category}] {self.text[:60]}"

    @property
    def is_live(self) -> bool:
        return self.valid_until is None

    @property
    def value_rows(self) -> list[values.Row]:
        """A JSON value as the privacy page shows it (memory/facts/values.py); [] for a text."""
        return values.rows(self.value, self.text) if isinstance(self.value, dict) else []


class MemoryPolicy(TenantOwned):
    """Per tenant and category: how long facts live, how many, whether agents may write."""

    category = models.CharField(max_length=40)
    label = models.CharField(max_length=100, blank=True)
    ttl_days = models.PositiveIntegerField(null=True, blank=True)  # None: the tenant's default
    max_facts_per_subject = models.PositiveIntegerField(default=200)
    agents_may_write = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["category"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "category"], name="mempolicy_unique_category")
        ]

    def __str__(self) -> str:
        return f"{self.category} policy"


class MemorySettings(TenantOwned):
    """One row per tenant: whether managers and admins may look at members' memories."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
    support_access = models.BooleanField(default=False)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"memory settings of {self.tenant_id}"


class PrivacyLinkUse(TenantOwned):
    """A one-time privacy link that has been opened: a second open is refused."""

    nonce = models.CharField(max_length=64, unique=True)
    subject = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    used_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.nonce
