"""Django admin of the shared tables: read-only, like every engine-owned table."""

from __future__ import annotations

from django.contrib import admin

from core.models import IdempotencyRecord
from tenants.admin import ReadOnlyAdmin


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("key", "status", "response_status", "created_at", "expires_at")
