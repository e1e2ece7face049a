from __future__ import annotations

from django.contrib import admin

from agents.demo.models import DemoRefund
from core.admin import ReadOnlyAdmin


@admin.register(DemoRefund)
class DemoRefundAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "customer", "amount_cents", "requests", "created_at")
