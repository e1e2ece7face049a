"""What the runtime's rows look like in the API: runs, their checkpoints, attempts and
tool-call ledger (read-only). The surfaces and features that show a run use these."""

from __future__ import annotations

from rest_framework import serializers

from agents.runtime.models import (
    AttemptOutcome,
    Checkpoint,
    Run,
    RunStatus,
    StepAttempt,
    ToolCall,
    ToolCallStatus,
)
from core.serializers import EnumField


class RunSerializer(serializers.ModelSerializer):
    status = EnumField(RunStatus, read_only=True)
    attempt = serializers.IntegerField(
        source="attempts", read_only=True, help_text="Attempt number of the current step."
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "agent",
            "agent_version",
            "session",
            "status",
            "current_step",
            "step_seq",
            "input",
            "output",
            "error",
            "attempt",
            "waiting_for",
            "cancel_requested",
            "not_before",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
        ]
        read_only_fields = fields


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = [
            "seq",
            "step",
            "next_step",
            "state",
            "schema_version",
            "messages_upto",
            "created_at",
        ]
        read_only_fields = fields


class AttemptSerializer(serializers.ModelSerializer):
    outcome = EnumField(AttemptOutcome, read_only=True)

    class Meta:
        model = StepAttempt
        fields = [
            "seq",
            "attempt",
            "step",
            "worker",
            "outcome",
            "error_class",
            "error_code",
            "message",
            "traceback",
            "started_at",
            "ended_at",
            "duration_ms",
        ]
        read_only_fields = fields


class ToolCallSerializer(serializers.ModelSerializer):
    status = EnumField(ToolCallStatus, read_only=True)

    class Meta:
        model = ToolCall
        fields = [
            "seq",
            "call_index",
            "tool",
            "idempotency_key",
            "arguments",
            "status",
            "result",
            "sends",
            "created_at",
            "completed_at",
        ]
        read_only_fields = fields
