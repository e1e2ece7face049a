"""Webhook endpoints (agents/runtime/webhooks.py): where a decision on a LangGraph thread's
interrupt is POSTed, signed, so the graph resumes without polling. Admins only (role, or a key
with the `admin` scope): an endpoint receives what managers decide."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.runtime import webhooks
from agents.runtime.models import WebhookDelivery, WebhookEndpoint
from core.api import ApiView, error_responses, validated
from tenants.errors import NotFound
from tenants.idempotency import idempotent
from tenants.models import Scope
from tenants.principal import Principal

TAGS = ["webhooks"]


class EndpointCreateSerializer(serializers.Serializer):
    url = serializers.URLField(max_length=500)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=webhooks.EVENTS),
        default=list(webhooks.EVENTS),
        min_length=1,
        max_length=len(webhooks.EVENTS),
    )
    description = serializers.CharField(max_length=200, allow_blank=True, default="")

    def validate_url(self, value: str) -> str:
        if not value.lower().startswith(("https://", "http://")):
            raise serializers.ValidationError("An http:// or https:// address.")
        return value


class EndpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "events", "description", "created_by_label", "created_at"]
        read_only_fields = fields

    def to_representation(self, instance: WebhookEndpoint) -> dict[str, Any]:
        shown = super().to_representation(instance)
        shown["active"] = instance.disabled_at is None
        return shown


class EndpointCreatedSerializer(EndpointSerializer):
    secret = serializers.CharField(help_text="shown once: verify each delivery's signature")

    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "status",
            "attempts",
            "last_status_code",
            "last_error",
            "created_at",
            "next_attempt_at",
            "delivered_at",
            "payload",
        ]
        read_only_fields = fields


def _endpoint(principal: Principal, endpoint_id: Any) -> WebhookEndpoint:
    found = WebhookEndpoint.objects.for_tenant(principal.tenant).filter(pk=endpoint_id).first()
    if found is None:
        raise NotFound("No such webhook endpoint.")
    return found


class EndpointsView(ApiView):
    read_scope = Scope.ADMIN
    write_scope = Scope.ADMIN

    @extend_schema(
        operation_id="webhooks_list",
        tags=TAGS,
        responses={200: EndpointSerializer(many=True), **error_responses(403)},
    )
    def get(self, request: Request) -> Response:
        """The tenant's webhook endpoints, newest first (secrets are never shown again)."""
        rows = WebhookEndpoint.objects.for_tenant(request.principal.tenant)[:200]
        return Response(EndpointSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="webhooks_create",
        tags=TAGS,
        request=EndpointCreateSerializer,
        responses={201: EndpointCreatedSerializer, **error_responses(400, 403)},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        """Add an endpoint; the answer holds its signing secret, shown this once."""
        data = validated(EndpointCreateSerializer, request.data)
        endpoint = webhooks.webhook_endpoint_create(principal=request.principal, **data)
        return Response(EndpointCreatedSerializer(endpoint).data, status=status.HTTP_201_CREATED)


class EndpointView(ApiView):
    read_scope = Scope.ADMIN
    write_scope = Scope.ADMIN

    @extend_schema(
        operation_id="webhooks_disable",
        tags=TAGS,
        responses={204: None, **error_responses(403, 404)},
    )
    def delete(self, request: Request, endpoint_id: uuid.UUID) -> Response:
        """Stop sending to this endpoint (its pending deliveries are given up)."""
        endpoint = _endpoint(request.principal, endpoint_id)
        webhooks.webhook_endpoint_disable(principal=request.principal, endpoint=endpoint)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveriesView(ApiView):
    read_scope = Scope.ADMIN

    @extend_schema(
        operation_id="webhooks_deliveries",
        tags=TAGS,
        responses={200: DeliverySerializer(many=True), **error_responses(403, 404)},
    )
    def get(self, request: Request, endpoint_id: uuid.UUID) -> Response:
        """The endpoint's last 100 deliveries, newest first, with how each try went."""
        endpoint = _endpoint(request.principal, endpoint_id)
        rows = WebhookDelivery.objects.for_tenant(request.principal.tenant).filter(
            endpoint=endpoint
        )[:100]
        return Response(DeliverySerializer(rows, many=True).data)
