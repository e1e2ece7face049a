from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from tenants import views, views_members
from tenants.auth import views as views_auth
from tenants.forms import LoginForm

app_name = "tenants"

urlpatterns = [
    path("", views.home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True, form_class=LoginForm),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(
            success_url=reverse_lazy("tenants:password_change_done")
        ),
        name="password_change",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("password/reset/", views_auth.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password/reset/sent/",
        views_auth.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            success_url=reverse_lazy("tenants:password_reset_complete")
        ),
        name="password_reset_confirm",
    ),
    path(
        "password/reset/done/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("invitations/<str:token>/", views_auth.invitation_accept, name="invitation_accept"),
    path("tenants/switch/", views.switch_tenant, name="switch_tenant"),
    path("admin/", views.admin_home, name="admin_home"),
    path("admin/members/", views_members.members, name="members"),
    path("admin/members/invite/", views_members.member_invite, name="member_invite"),
    path("admin/members/<int:membership_id>/", views_members.member_row, name="member_row"),
    path("admin/members/<int:membership_id>/role/", views_members.member_role, name="member_role"),
    path(
        "admin/members/<int:membership_id>/unlock/",
        views_members.member_unlock,
        name="member_unlock",
    ),
    path(
        "admin/members/<int:membership_id>/remove/",
        views_members.member_remove,
        name="member_remove",
    ),
    path(
        "admin/invitations/<uuid:invitation_id>/",
        views_members.invitation_row,
        name="invitation_row",
    ),
    path(
        "admin/invitations/<uuid:invitation_id>/resend/",
        views_members.invitation_resend,
        name="invitation_resend",
    ),
    path(
        "admin/invitations/<uuid:invitation_id>/revoke/",
        views_members.invitation_revoke,
        name="invitation_revoke",
    ),
    path("admin/api-keys/", views.api_keys, name="api_keys"),
    path("admin/api-keys/<uuid:key_id>/revoke/", views.api_key_revoke, name="api_key_revoke"),
    path("admin/audit/", views.audit_log, name="audit_log"),
]
