"""The Django admin's base for every table: read-only, like every engine-owned table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Look, never touch: changes go through the audited services and console pages."""

    list_per_page = 50
    show_full_result_count = False  # counting millions of rows for a pager is not free

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
