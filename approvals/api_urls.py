"""REST endpoints of the approvals app."""

from django.urls import path

from approvals import api

app_name = "approvals_api"

urlpatterns = [
    path("approvals", api.ApprovalListView.as_view(), name="api_approvals"),
    path("approvals/<uuid:request_id>", api.ApprovalDetailView.as_view(), name="api_approval"),
    path(
        "approvals/<uuid:request_id>/decision",
        api.ApprovalDecisionView.as_view(),
        name="api_approval_decision",
    ),
]
