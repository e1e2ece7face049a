"""REST endpoints of the agents app."""

from django.urls import path

from agents import api

urlpatterns = [
    path("agents", api.AgentListView.as_view(), name="api_agents"),
    path("sessions", api.SessionListView.as_view(), name="api_sessions"),
    path("sessions/<uuid:session_id>", api.SessionDetailView.as_view(), name="api_session"),
    path(
        "sessions/<uuid:session_id>/messages",
        api.SessionMessagesView.as_view(),
        name="api_session_messages",
    ),
    path("runs", api.RunListView.as_view(), name="api_runs"),
    path("runs/<uuid:run_id>", api.RunDetailView.as_view(), name="api_run"),
    path("runs/<uuid:run_id>/cancel", api.RunCancelView.as_view(), name="api_run_cancel"),
    path("runs/<uuid:run_id>/events", api.RunEventView.as_view(), name="api_run_events"),
    path("runs/<uuid:run_id>/decision", api.RunDecisionView.as_view(), name="api_run_decision"),
]
