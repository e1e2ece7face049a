"""REST endpoints of the tenants app: who am I, API keys, members, the audit log."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import selectors, services
from tenants.models import ApiKey, AuditEvent, Membership, Role, Scope


class MeSerializer(serializers.Serializer):
    tenant = serializers.DictField()
    role = serializers.CharField(allow_null=True)
    scopes = serializers.ListField(child=serializers.CharField())
    actor = serializers.CharField()


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "created_at",
            "last_used_at",
            "revoked_at",
            "expires_at",
        ]


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices), allow_empty=False
    )
    expires_in_days = serializers.IntegerField(
        min_value=1,
        max_value=services.API_KEY_MAX_DAYS,
        required=False,
        allow_null=True,
        help_text="The key stops working this many days from now; absent or null: never.",
    )


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "role", "created_at"]


class RoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "actor_label",
            "action",
            "target_type",
            "target_id",
            "before",
            "after",
            "created_at",
        ]


class MeView(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request):
        p = request.principal
        return Response(
            {
                "tenant": {"id": str(p.tenant.pk), "slug": p.tenant.slug, "name": p.tenant.name},
                "role": p.role,
                "scopes": sorted(p.scopes),
                "actor": p.label,
            }
        )


class ApiKeyListView(APIView):
    read_scope = write_scope = Scope.ADMIN

    @extend_schema(responses=ApiKeySerializer(many=True))
    def get(self, request):
        keys = selectors.api_keys_for_tenant(tenant=request.principal.tenant)
        return Response(ApiKeySerializer(keys, many=True).data)

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeySerializer})
    def post(self, request):
        form = ApiKeyCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        created = services.api_key_create(actor=request.principal, **form.validated_data)
        body = ApiKeySerializer(created.key).data | {"key": created.raw}
        return Response(body, status=status.HTTP_201_CREATED)


class ApiKeyRevokeView(APIView):
    write_scope = Scope.ADMIN

    @extend_schema(request=None, responses=ApiKeySerializer)
    def post(self, request, key_id):
        tenant = request.principal.tenant
        key = get_object_or_404(selectors.api_keys_for_tenant(tenant=tenant), pk=key_id)
        services.api_key_revoke(actor=request.principal, key=key)
        return Response(ApiKeySerializer(key).data)


class MemberListView(APIView):
    read_scope = Scope.ADMIN

    @extend_schema(responses=MembershipSerializer(many=True))
    def get(self, request):
        members = selectors.members_for_tenant(tenant=request.principal.tenant)
        return Response(MembershipSerializer(members, many=True).data)


class MemberRoleView(APIView):
    write_scope = Scope.ADMIN

    @extend_schema(request=RoleSerializer, responses=MembershipSerializer)
    def post(self, request, membership_id):
        tenant = request.principal.tenant
        membership = get_object_or_404(
            selectors.members_for_tenant(tenant=tenant), pk=membership_id
        )
        form = RoleSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        services.membership_set_role(
            actor=request.principal, membership=membership, role=form.validated_data["role"]
        )
        return Response(MembershipSerializer(membership).data)


class AuditEventListView(APIView):
    read_scope = Scope.ADMIN

    @extend_schema(responses=AuditEventSerializer(many=True))
    def get(self, request):
        before = request.query_params.get("before")
        # ASCII digits only: "²" is a digit to isdigit() but not to int().
        if before is not None and not (before.isascii() and before.isdigit() and len(before) < 19):
            raise serializers.ValidationError({"before": ["Must be an event id."]})
        events = selectors.audit_events_for_tenant(
            tenant=request.principal.tenant,
            target_type=request.query_params.get("target_type"),
            target_id=request.query_params.get("target_id"),
            before_id=int(before) if before else None,
        )
        return Response(AuditEventSerializer(events, many=True).data)
