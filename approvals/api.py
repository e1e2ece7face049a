"""REST endpoints for integrations (a chat-ops bot, say): list, get and decide approvals.

Lookups go through `selectors.approval_request_for` (404 outside the tenant, and for members outside
their own runs); the decision is `approval_decide`, with `Idempotency-Key` as on every POST.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from approvals import selectors
from approvals import serializers as s
from approvals.services import approval_decide
from core.api import ApiView, error_responses, validated
from tenants.idempotency import idempotent
from tenants.models import Scope
from tenants.replica import replica_reads

TAGS = ["approvals"]


class ApprovalListView(ApiView):
    @extend_schema(
        operation_id="approvals_list",
        tags=TAGS,
        parameters=[s.ApprovalListQuerySerializer],
        responses={200: s.ApprovalPageSerializer, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        """Approval requests: pending by deadline, or decided newest first; keyset pages."""
        q = validated(s.ApprovalListQuerySerializer, request.query_params)
        with replica_reads(request):  # may lag a few seconds, never after the caller's write
            page = selectors.inbox_page(
                request.principal,
                status=q["status"],
                action=q["action"],
                mine=q["mine"],
                after=q.get("after"),
                limit=q["limit"],
            )
            body = {"results": page.rows, "next": page.next.encode() if page.next else None}
            return Response(s.ApprovalPageSerializer(body).data)


class ApprovalDetailView(ApiView):
    @extend_schema(
        operation_id="approvals_retrieve",
        tags=TAGS,
        responses={200: s.ApprovalSerializer, **error_responses(404)},
    )
    def get(self, request: Request, request_id: Any) -> Response:
        """One approval request: the proposed action, its rules, and its decision if any."""
        approval = selectors.approval_request_for(request.principal, request_id)
        return Response(s.ApprovalSerializer(approval).data)


class ApprovalDecisionView(ApiView):
    write_scope = Scope.APPROVE

    @extend_schema(
        operation_id="approvals_decision_create",
        tags=TAGS,
        request=s.DecisionSerializer,
        responses={
            200: s.ApprovalDecisionResultSerializer,
            **error_responses(400, 403, 404, 409, 413, 422),
        },
    )
    @idempotent
    def post(self, request: Request, request_id: Any) -> Response:
        """Approve (optionally with edited arguments) or reject, once; 409 names the winner."""
        approval = selectors.approval_request_for(request.principal, request_id)
        data = validated(s.DecisionSerializer, request.data)
        approval = approval_decide(
            principal=request.principal,
            request=approval,
            approve=data["approve"],
            comment=data["comment"],
            edited_arguments=data["arguments"],
        )
        approval.run.refresh_from_db()
        body = {"approval": approval, "run": approval.run}
        return Response(s.ApprovalDecisionResultSerializer(body).data)
