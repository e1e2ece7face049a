from django.urls import path

from tenants import api

app_name = "tenants_api"

urlpatterns = [
    path("me", api.MeView.as_view(), name="api_me"),
    path("api-keys", api.ApiKeyListView.as_view(), name="api_api_keys"),
    path(
        "api-keys/<uuid:key_id>/revoke", api.ApiKeyRevokeView.as_view(), name="api_api_key_revoke"
    ),
    path("members", api.MemberListView.as_view(), name="api_members"),
    path("members/<int:membership_id>", api.MemberView.as_view(), name="api_member"),
    path("members/<int:membership_id>/role", api.MemberRoleView.as_view(), name="api_member_role"),
    path("invitations", api.InvitationListView.as_view(), name="api_invitations"),
    path(
        "invitations/<uuid:invitation_id>/resend",
        api.InvitationResendView.as_view(),
        name="api_invitation_resend",
    ),
    path(
        "invitations/<uuid:invitation_id>/revoke",
        api.InvitationRevokeView.as_view(),
        name="api_invitation_revoke",
    ),
    path("audit-events", api.AuditEventListView.as_view(), name="api_audit_events"),
]
