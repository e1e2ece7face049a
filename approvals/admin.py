"""Django admin for the approvals tables, read-only: decisions and policy changes go through
the audited approvals services and pages."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin

from approvals import models
from core.admin import ReadOnlyAdmin


@admin.register(models.ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "amount", "status", "requested_at", "due_at")
    list_filter = ("status", "action")
    raw_id_fields = ("run",)


@admin.register(models.ApprovalPolicy)
class ApprovalPolicyAdmin(ReadOnlyAdmin):
    list_display = ("action", "amount_threshold", "approver_role", "on_expiry", "version")


@admin.register(models.ApproverGroup)
class ApproverGroupAdmin(ReadOnlyAdmin):
    list_display = ("name", "created_at")


@admin.register(models.ApproverGroupMember)
class ApproverGroupMemberAdmin(ReadOnlyAdmin):
    list_display = ("group", "user")


# Tables added later are listed too (read-only) until they get an admin of their own.
for _model in apps.get_app_config("approvals").get_models():
    if not admin.site.is_registered(_model):
        admin.site.register(_model, ReadOnlyAdmin)
