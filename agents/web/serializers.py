"""Shapes of the agents API: what comes in (validated) and what goes out (read-only)."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import uuid
from typing import Any

from django.db import models
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.runtime.models import (
    AgentSession,
    AttemptOutcome,
    Checkpoint,
    Message,
    MessageRole,
    PackedContext,
    Run,
    RunStatus,
    SessionStatus,
    StepAttempt,
    ToolCall,
    ToolCallStatus,
)
from approvals.models import ApprovalRequest, ApprovalStatus
from core import json_input


class EnumField(serializers.ChoiceField):
    """A choice field documented as one named enum (RunStatusEnum, ...), never a guessed name."""

    def __init__(self, choices: type[models.TextChoices], **kwargs: Any) -> None:
        self.enum_name = f"{choices.__name__}Enum"
        super().__init__(choices=choices.choices, **kwargs)


class EnumFieldSchema(OpenApiSerializerFieldExtension):
    target_class = EnumField

    def get_name(self) -> str:
        return self.target.enum_name

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.target.choices)}


# --- keyset cursors -------------------------------------------------------------------------------

Cursor = tuple[dt.datetime, uuid.UUID]


def cursor_encode(created_at: dt.datetime, pk: uuid.UUID) -> str:
    """An opaque cursor naming the row a page ended at."""
    raw = json.dumps([created_at.isoformat(), str(pk)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@extend_schema_field(OpenApiTypes.STR)
class CursorField(serializers.Field):
    """`?before=`: the `next` cursor of the previous page, decoded to (created_at, id)."""

    default_error_messages = {"invalid": "Not a cursor from this API."}

    def to_internal_value(self, data: Any) -> Cursor:
        try:
            padded = str(data) + "=" * (-len(str(data)) % 4)
            created_at, pk = json_input.loads(base64.urlsafe_b64decode(padded.encode()))
            moment = dt.datetime.fromisoformat(created_at)
            if moment.tzinfo is None:
                raise ValueError("naive timestamp")
            return moment, uuid.UUID(pk)
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
            self.fail("invalid")

    def to_representation(self, value: Cursor) -> str:
        return cursor_encode(*value)


class PageQuerySerializer(serializers.Serializer):
    before = CursorField(required=False, help_text="The `next` cursor of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)


class RunListQuerySerializer(PageQuerySerializer):
    status = EnumField(RunStatus, required=False)
    agent = serializers.CharField(max_length=100, required=False)


# --- input ----------------------------------------------------------------------------------------


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: a string such as "no" is an error, not a guess."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid")


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object (a dict), never a list, string or number."""

    default_error_messages = {"not_an_object": "Must be a JSON object."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_an_object")
        return value


class SessionCreateSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=100)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    user = serializers.CharField(
        max_length=150,
        required=False,
        help_text="Username of the member the conversation is for (admins, managers and "
        "API keys only; members always open their own).",
    )


class MessageCreateSerializer(serializers.Serializer):
    content = serializers.CharField(trim_whitespace=False)

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Write something.")
        return value


class RunCreateSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=100)
    input = JSONObjectField(required=False, default=dict)
    session = serializers.UUIDField(required=False, allow_null=True, default=None)


class EventSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    payload = JSONObjectField(required=False, default=dict)


class DecisionSerializer(serializers.Serializer):
    approve = StrictBooleanField()
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
    arguments = JSONObjectField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Edited arguments for the action; validated against the tool's JSON schema.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("arguments") is not None and not attrs["approve"]:
            raise serializers.ValidationError({"arguments": ["Only an approval edits arguments."]})
        return attrs


# --- output ---------------------------------------------------------------------------------------


class AgentSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField()
    description = serializers.CharField()
    first_step = serializers.CharField(source="first")
    steps = serializers.ListField(child=serializers.CharField())
    state_version = serializers.IntegerField()


class MessageSerializer(serializers.ModelSerializer):
    role = EnumField(MessageRole, read_only=True)

    class Meta:
        model = Message
        fields = ["id", "seq", "role", "content", "tool_call", "tool_result", "run", "created_at"]
        read_only_fields = fields


class SessionSerializer(serializers.ModelSerializer):
    status = EnumField(SessionStatus, read_only=True)
    user = serializers.CharField(source="user.username", read_only=True, allow_null=True)

    class Meta:
        model = AgentSession
        fields = ["id", "agent", "title", "status", "user", "last_seq", "created_at", "updated_at"]
        fields += ["parent", "fork_seq"]
        read_only_fields = fields


class SessionDetailSerializer(SessionSerializer):
    messages = serializers.SerializerMethodField()

    class Meta(SessionSerializer.Meta):
        fields = [*SessionSerializer.Meta.fields, "summary", "messages"]
        read_only_fields = fields

    @extend_schema_field(MessageSerializer(many=True))
    def get_messages(self, session: AgentSession) -> list[dict[str, Any]]:
        return MessageSerializer(self.context["messages"], many=True).data


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


class ApprovalRequestSerializer(serializers.ModelSerializer):
    status = EnumField(ApprovalStatus, read_only=True)

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "status",
            "step",
            "checkpoint_seq",
            "action",
            "arguments",
            "amount",
            "reason",
            "requested_at",
            "due_at",
            "decided_by_label",
            "decided_at",
            "comment",
            "edited_arguments",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """A run with everything that explains it: checkpoints, attempts, ledger, approvals."""

    checkpoints = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    tool_calls = serializers.SerializerMethodField()
    approvals = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "checkpoints", "attempts", "tool_calls"]
        fields += ["approvals"]
        read_only_fields = fields

    @extend_schema_field(CheckpointSerializer(many=True))
    def get_checkpoints(self, run: Run) -> list[dict[str, Any]]:
        return CheckpointSerializer(self.context["checkpoints"], many=True).data

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts(self, run: Run) -> list[dict[str, Any]]:
        return AttemptSerializer(self.context["attempts"], many=True).data

    @extend_schema_field(ToolCallSerializer(many=True))
    def get_tool_calls(self, run: Run) -> list[dict[str, Any]]:
        return ToolCallSerializer(self.context["tool_calls"], many=True).data

    @extend_schema_field(ApprovalRequestSerializer(many=True))
    def get_approvals(self, run: Run) -> list[dict[str, Any]]:
        return ApprovalRequestSerializer(self.context["approvals"], many=True).data


class RunPageSerializer(serializers.Serializer):
    results = RunSerializer(many=True)
    next = serializers.CharField(
        allow_null=True, help_text="Pass as `?before=` for the next page; null on the last page."
    )


class SessionPageSerializer(serializers.Serializer):
    results = SessionSerializer(many=True)
    next = serializers.CharField(
        allow_null=True, help_text="Pass as `?before=` for the next page; null on the last page."
    )


class MessagePostedSerializer(serializers.Serializer):
    message = MessageSerializer()
    run = RunSerializer()


class DecisionResultSerializer(serializers.Serializer):
    approval = ApprovalRequestSerializer()
    run = RunSerializer()


class ErrorSerializer(serializers.Serializer):
    """Every error: a stable code, a message, and per-field errors or detail when useful."""

    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(required=False)
    detail = serializers.JSONField(required=False)


# --- threads and packed contexts ------------------------------------------------------------------


class ForkCreateSerializer(serializers.Serializer):
    at_seq = serializers.IntegerField(
        help_text="The message of this conversation to fork after (its `seq`)."
    )
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class ThreadMessageSerializer(serializers.Serializer):
    position = serializers.IntegerField(source="pos", help_text="Place in the thread, from 1.")
    session = serializers.UUIDField(help_text="The conversation the message was written in.")
    seq = serializers.IntegerField()
    role = EnumField(MessageRole)
    content = serializers.CharField(allow_blank=True)
    tool_call = serializers.JSONField(allow_null=True)
    tool_result = serializers.JSONField(allow_null=True)
    inherited = serializers.BooleanField(help_text="Read from an ancestor up to its fork point.")


class ThreadAncestorSerializer(serializers.Serializer):
    session = SessionSerializer()
    upto = serializers.IntegerField(
        allow_null=True, help_text="The thread reads this conversation up to this seq."
    )


class ThreadSerializer(serializers.Serializer):
    session = SessionSerializer()
    ancestors = ThreadAncestorSerializer(many=True)
    summary = serializers.CharField(allow_blank=True)
    summary_upto = serializers.IntegerField(
        help_text="The summary stands for the thread's messages 1 to this position."
    )
    messages = ThreadMessageSerializer(many=True)


class PackedItemSerializer(serializers.Serializer):
    section = serializers.CharField()
    label = serializers.CharField()
    tokens = serializers.IntegerField()
    included = serializers.BooleanField()
    reason = serializers.CharField()


class PackedSectionSerializer(serializers.Serializer):
    section = serializers.CharField()
    included = serializers.IntegerField()
    dropped = serializers.IntegerField()
    tokens_included = serializers.IntegerField()
    tokens_dropped = serializers.IntegerField()


class PackedContextSerializer(serializers.ModelSerializer):
    sections = PackedSectionSerializer(many=True, help_text="In the order they are sent.")
    items = PackedItemSerializer(many=True)

    class Meta:
        model = PackedContext
        fields = [
            "seq",
            "index",
            "step",
            "model",
            "encoding",
            "budget",
            "reserve_output",
            "tokens_used",
            "sections",
            "items",
            "created_at",
        ]
        read_only_fields = fields
