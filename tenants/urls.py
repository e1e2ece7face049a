from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from tenants import views
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
    path("tenants/switch/", views.switch_tenant, name="switch_tenant"),
    path("admin/", views.admin_home, name="admin_home"),
    path("admin/members/", views.members, name="members"),
    path("admin/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("admin/members/<int:membership_id>/unlock/", views.member_unlock, name="member_unlock"),
    path("admin/api-keys/", views.api_keys, name="api_keys"),
    path("admin/api-keys/<uuid:key_id>/revoke/", views.api_key_revoke, name="api_key_revoke"),
    path("admin/audit/", views.audit_log, name="audit_log"),
]
