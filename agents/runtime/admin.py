"""Django admin for power users: every agents table, read-only (the engine owns these rows;
repairs go through the console's audited, version-fenced actions). Row-level security
still applies: the admin shows the tenant the signed-in user is working in."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin

from agents.runtime import models
from core.admin import ReadOnlyAdmin


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "status", "current_step", "step_seq", "attempts", "created_at")
    list_filter = ("status", "agent")
    search_fields = ("=id",)
    ordering = ("-created_at", "-id")
    raw_id_fields = ("session", "created_by", "resolved_by")


@admin.register(models.AgentSession)
class AgentSessionAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "user", "status", "created_at")
    list_filter = ("status", "agent")
    raw_id_fields = ("user",)


@admin.register(models.Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("session", "seq", "role", "created_at")
    raw_id_fields = ("session", "run")


@admin.register(models.Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "step", "next_step", "schema_version", "created_at")
    raw_id_fields = ("run",)


@admin.register(models.RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "kind", "created_at")
    raw_id_fields = ("run",)


@admin.register(models.StepAttempt)
class StepAttemptAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "attempt", "step", "outcome", "duration_ms", "started_at")
    list_filter = ("outcome",)
    raw_id_fields = ("run",)


@admin.register(models.ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "call_index", "tool", "status", "sends", "created_at")
    list_filter = ("status", "tool")
    raw_id_fields = ("run",)


# Tables added later are listed too (read-only) until they get an admin of their own. The
# event log is a view over RunEvent and Checkpoint, both listed already.
for _model in apps.get_app_config("agents").get_models():
    if not admin.site.is_registered(_model) and _model is not models.RunEventLog:
        admin.site.register(_model, ReadOnlyAdmin)
