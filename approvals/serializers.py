"""Shapes of the approvals API (read-only out; decisions come in as the agents API's)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.runtime.models import RunStatus
from agents.web.serializers import EnumField, RunSerializer
from approvals.models import ApprovalRequest, ApprovalStatus, ApproverRole, OnExpiry
from approvals.selectors import STATUS_FILTERS, Cursor


@extend_schema_field(OpenApiTypes.STR)
class CursorField(serializers.Field):
    """`?after=`: the `next` cursor of the previous page."""

    default_error_messages = {"invalid": "Not a cursor from this API."}

    def to_internal_value(self, data: Any) -> Cursor:
        try:
            if not isinstance(data, str) or len(data) > 400:
                raise ValueError("not a cursor")
            return Cursor.decode(data)
        except ValueError:
            raise serializers.ValidationError(
                self.error_messages["invalid"], code="invalid"
            ) from None

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
    after = CursorField(required=False, help_text="`next` of the previous page.")
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
