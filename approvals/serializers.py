"""Shapes of the approvals API, and of a decision wherever one is posted (the approvals API
and the agents API's run decision)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agents.runtime.models import RunStatus
from agents.runtime.serializers import RunSerializer
from approvals.models import ApprovalRequest, ApprovalStatus, ApproverRole, OnExpiry
from approvals.selectors import STATUS_FILTERS, Cursor
from core.serializers import CursorField, EnumField, JSONObjectField, StrictBooleanField


class InboxCursorField(CursorField):
    """`?after=`: the `next` cursor of the previous page."""

    def decode(self, data: Any) -> Cursor:
        """The inbox position the cursor names; ValueError if it names none."""
        if not isinstance(data, str) or len(data) > 400:
            raise ValueError("not a cursor")
        return Cursor.decode(data)

    def to_representation(self, value: Cursor) -> str:
        return value.encode()


class ApprovalListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=STATUS_FILTERS,
        default=ApprovalStatus.PENDING.value,
        help_text="pending (soonest deadline first), decided (any other status) or one status "
        "(newest first).",
    )
    action = serializers.CharField(max_length=100, required=False, default="")
    mine = serializers.BooleanField(
        required=False, default=False, help_text="Only requests the caller may decide."
    )
    after = InboxCursorField(required=False, help_text="`next` of the previous page.")
    limit = serializers.IntegerField(min_value=1, max_value=100, default=50)


class ApprovalSerializer(serializers.ModelSerializer):
    status = EnumField(ApprovalStatus, read_only=True)
    run_agent = serializers.CharField(source="run.agent", read_only=True)
    run_status = EnumField(RunStatus, source="run.status", read_only=True)
    approver_role = EnumField(ApproverRole, read_only=True)
    approver_group = serializers.CharField(source="approver_group_name", read_only=True)
    on_expiry = EnumField(OnExpiry, read_only=True)
    started_by = serializers.CharField(source="started_by_label", read_only=True)
    decided_by = serializers.CharField(source="decided_by_label", read_only=True)

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "run",
            "run_agent",
            "run_status",
            "status",
            "step",
            "checkpoint_seq",
            "action",
            "arguments",
            "amount",
            "reason",
            "requested_at",
            "due_at",
            "approver_role",
            "approver_group",
            "four_eyes",
            "on_expiry",
            "escalated_at",
            "started_by",
            "decided_by",
            "decided_at",
            "comment",
            "edited_arguments",
            "version",
            "policy",
        ]
        read_only_fields = fields


class ApprovalPageSerializer(serializers.Serializer):
    results = ApprovalSerializer(many=True)
    next = serializers.CharField(
        allow_null=True, help_text="Pass as `?after=` for the next page; null on the last page."
    )


class ApprovalDecisionResultSerializer(serializers.Serializer):
    approval = ApprovalSerializer()
    run = RunSerializer()


# --- decisions ------------------------------------------------------------------------------------


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


class DecisionResultSerializer(serializers.Serializer):
    approval = ApprovalRequestSerializer()
    run = RunSerializer()
