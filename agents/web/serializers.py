"""Shapes of the agents API: what comes in (validated) and what goes out (read-only)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.runtime.models import (
    AgentSession,
    Message,
    MessageRole,
    PackedContext,
    Run,
    RunStatus,
    SessionStatus,
)
from agents.runtime.serializers import (
    AttemptSerializer,
    CheckpointSerializer,
    RunSerializer,
    ToolCallSerializer,
)
from approvals.serializers import ApprovalRequestSerializer
from core.serializers import EnumField, JSONObjectField, PageQuerySerializer

# --- input ----------------------------------------------------------------------------------------


class RunListQuerySerializer(PageQuerySerializer):
    status = EnumField(RunStatus, required=False)
    agent = serializers.CharField(max_length=100, required=False)


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


class PackedFactSerializer(serializers.Serializer):
    id = serializers.CharField(
        allow_blank=True,
        help_text="The fact's id (GET /api/v1/memory/facts/{id}); its text is not kept here.",
    )
    key = serializers.CharField(allow_blank=True)
    category = serializers.CharField(allow_blank=True)
    tokens = serializers.IntegerField(help_text="How many tokens its quoted line took.")


class PackedItemSerializer(serializers.Serializer):
    section = serializers.CharField()
    label = serializers.CharField()
    tokens = serializers.IntegerField()
    included = serializers.BooleanField()
    reason = serializers.CharField()
    facts = PackedFactSerializer(
        many=True,
        default=list,
        help_text="Memory items: the remembered facts they quote, by reference.",
    )


class PackedSectionSerializer(serializers.Serializer):
    section = serializers.CharField()
    included = serializers.IntegerField()
    dropped = serializers.IntegerField()
    tokens_included = serializers.IntegerField()
    tokens_dropped = serializers.IntegerField()


class PackedContextSerializer(serializers.ModelSerializer):
    sections = PackedSectionSerializer(many=True, help_text="In the order they are sent.")
    items = PackedItemSerializer(many=True)
    model = serializers.CharField(
        read_only=True, help_text="The model whose tokenizer counted the budget."
    )
    provider = serializers.CharField(
        read_only=True,
        help_text='Who answered the call ("scripted", "openai"); empty when no call followed '
        "or the record predates it.",
    )
    provider_model = serializers.CharField(
        read_only=True, help_text="The model that answered, as the reply named it."
    )

    class Meta:
        model = PackedContext
        fields = [
            "seq",
            "index",
            "step",
            "model",
            "provider",
            "provider_model",
            "encoding",
            "budget",
            "reserve_output",
            "tokens_used",
            "sections",
            "items",
            "created_at",
        ]
        read_only_fields = fields
