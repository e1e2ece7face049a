"""REST endpoints of the tenants app: who am I, API keys, members, invitations, the audit log."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import selectors, services
from tenants.auth import invitations
from tenants.models import ApiKey, AuditEvent, Invitation, Membership, Role, Scope


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


class InvitationSerializer(serializers.ModelSerializer):
    invited_by = serializers.CharField(source="invited_by.username", default=None, read_only=True)
    expired = serializers.BooleanField(source="is_expired", read_only=True)

    class Meta:
        model = Invitation
        fields = [
            "id",
            "email",
            "role",
            "invited_by",
            "created_at",
            "sent_at",
            "expires_at",
            "expired",
            "revoked_at",
        ]


class InvitationCreateSerializer(serializers.Serializer):
    email = serializers.EmailField(max_length=254)
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


class MemberView(APIView):
    write_scope = Scope.ADMIN

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, membership_id):
        """Remove a member (never the tenant's last admin: 409 `last_admin`)."""
        tenant = request.principal.tenant
        membership = get_object_or_404(
            selectors.members_for_tenant(tenant=tenant), pk=membership_id
        )
        services.membership_remove(actor=request.principal, membership=membership)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationListView(APIView):
    read_scope = write_scope = Scope.ADMIN
    rate_bucket = {"POST": "write"}  # each one sends an email

    @extend_schema(responses=InvitationSerializer(many=True))
    def get(self, request):
        """Open invitations (not accepted, not revoked; expired ones included)."""
        found = selectors.open_invitations_for_tenant(tenant=request.principal.tenant)
        return Response(InvitationSerializer(found, many=True).data)

    @extend_schema(request=InvitationCreateSerializer, responses={201: InvitationSerializer})
    def post(self, request):
        """Invite an address with a role; the link goes by email only, never in the answer."""
        form = InvitationCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        invitation = invitations.invitation_create(actor=request.principal, **form.validated_data)
        return Response(InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)


def _open_invitation(request, invitation_id) -> Invitation:
    tenant = request.principal.tenant
    return get_object_or_404(selectors.open_invitations_for_tenant(tenant=tenant), pk=invitation_id)


class InvitationResendView(APIView):
    write_scope = Scope.ADMIN
    rate_bucket = "write"

    @extend_schema(request=None, responses=InvitationSerializer)
    def post(self, request, invitation_id):
        """Email a new link (the old one stops working) valid for the full time again."""
        invitation = _open_invitation(request, invitation_id)
        invitations.invitation_resend(actor=request.principal, invitation=invitation)
        return Response(InvitationSerializer(invitation).data)


class InvitationRevokeView(APIView):
    write_scope = Scope.ADMIN

    @extend_schema(request=None, responses=InvitationSerializer)
    def post(self, request, invitation_id):
        invitation = _open_invitation(request, invitation_id)
        invitations.invitation_revoke(actor=request.principal, invitation=invitation)
        return Response(InvitationSerializer(invitation).data)


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
