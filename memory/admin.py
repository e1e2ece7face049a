"""Django admin for the memory tables, read-only, and deliberately without the facts.

Facts are personal data: operators see them only through the privacy page's support access,
which the tenant grants and the audit log records. The policy and settings rows are shown.
"""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from memory import models


@admin.register(models.MemoryPolicy)
class MemoryPolicyAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "category", "ttl_days", "max_facts_per_subject", "agents_may_write")


@admin.register(models.MemorySettings)
class MemorySettingsAdmin(ReadOnlyAdmin):
    list_display = ("tenant", "support_access", "updated_at")
