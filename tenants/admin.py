"""Django admin for platform staff (`is_staff`), read-only: memberships, keys, accounts and the
audit log change through the console's audited services. Row-level security shows the current
tenant only."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User

from core.admin import ReadOnlyAdmin
from tenants import models
from tenants.forms import AdminLoginForm


@admin.register(models.Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ("name", "slug", "created_at")


@admin.register(models.Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "role", "created_at")
    list_filter = ("role",)


@admin.register(models.ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ("name", "prefix", "scopes", "created_at", "revoked_at")
    exclude = ("key_hash",)


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "actor_label", "target_type", "target_id", "created_at")
    list_filter = ("action",)


@admin.register(models.IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("key", "status", "response_status", "created_at", "expires_at")


@admin.register(models.Invitation)
class InvitationAdmin(ReadOnlyAdmin):
    list_display = ("email", "role", "sent_at", "expires_at", "accepted_at", "revoked_at")
    exclude = ("token_hash",)


# Tables added later are listed too (read-only) until they get an admin of their own.
for _model in apps.get_app_config("tenants").get_models():
    if not admin.site.is_registered(_model):
        admin.site.register(_model, ReadOnlyAdmin)


# People are managed in the console (members, roles) and by their own password change; the
# Django admin, for platform staff only, may look at accounts but never edit one: a staff
# account editing `is_superuser` or a password here would bypass every audited service.
admin.site.unregister(User)
admin.site.login_form = AdminLoginForm


@admin.register(User)
class UserAdmin(ReadOnlyAdmin):
    list_display = ("username", "email", "is_active", "is_staff", "last_login", "date_joined")
    list_filter = ("is_active", "is_staff")
    search_fields = ("username", "email")
    exclude = ("password", "user_permissions", "groups")
