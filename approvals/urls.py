"""Console pages of the approvals app: the inbox, one request, policies and groups."""

from django.urls import path

from approvals import views, views_policies

app_name = "approvals"

urlpatterns = [
    path("approvals/", views.inbox, name="approvals"),
    path("approvals/badge/", views.badge, name="approvals_badge"),
    path("approvals/<uuid:request_id>/", views.detail, name="approval_detail"),
    path("approvals/<uuid:request_id>/decide/", views.decide, name="approval_decide"),
    path("approvals/policies/", views_policies.policy_list, name="approval_policies"),
    path("approvals/policies/<int:policy_id>/", views_policies.policy_edit, name="approval_policy"),
    path(
        "approvals/policies/<int:policy_id>/delete/",
        views_policies.policy_delete,
        name="approval_policy_delete",
    ),
    path("approvals/groups/", views_policies.group_create, name="approver_groups"),
    path(
        "approvals/groups/<int:group_id>/members/",
        views_policies.group_members,
        name="approver_group_members",
    ),
    path(
        "approvals/groups/<int:group_id>/delete/",
        views_policies.group_delete,
        name="approver_group_delete",
    ),
]
