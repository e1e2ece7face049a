"""REST endpoints of the agents app."""

from django.urls import path

from agents.web import api, langgraph_api, langgraph_steps, webhooks_api

app_name = "agents_api"

urlpatterns = [
    # AgentStateSaver (sdk/python): LangGraph threads kept in the runtime's tables.
    path(
        "langgraph/checkpoints",
        langgraph_api.CheckpointsView.as_view(),
        name="api_langgraph_checkpoints",
    ),
    path("langgraph/steps", langgraph_steps.steps_view, name="api_langgraph_steps"),
    path("langgraph/copy", langgraph_api.CopyThreadView.as_view(), name="api_langgraph_copy"),
    path("langgraph/prune", langgraph_api.PruneView.as_view(), name="api_langgraph_prune"),
    path(
        "langgraph/runs/delete",
        langgraph_api.DeleteRunsView.as_view(),
        name="api_langgraph_runs_delete",
    ),
    path("langgraph/writes", langgraph_api.WritesView.as_view(), name="api_langgraph_writes"),
    path("langgraph/decision", langgraph_api.DecisionView.as_view(), name="api_langgraph_decision"),
    path(
        "langgraph/threads/<path:thread_id>",
        langgraph_api.ThreadView.as_view(),
        name="api_langgraph_thread",
    ),
    # Signed webhooks on decisions (agents/runtime/webhooks.py).
    path("webhooks", webhooks_api.EndpointsView.as_view(), name="api_webhooks"),
    path("webhooks/<uuid:endpoint_id>", webhooks_api.EndpointView.as_view(), name="api_webhook"),
    path(
        "webhooks/<uuid:endpoint_id>/deliveries",
        webhooks_api.DeliveriesView.as_view(),
        name="api_webhook_deliveries",
    ),
    path("agents", api.AgentListView.as_view(), name="api_agents"),
    path("sessions", api.SessionListView.as_view(), name="api_sessions"),
    path("sessions/<uuid:session_id>", api.SessionDetailView.as_view(), name="api_session"),
    path(
        "sessions/<uuid:session_id>/messages",
        api.SessionMessagesView.as_view(),
        name="api_session_messages",
    ),
    path(
        "sessions/<uuid:session_id>/forks",
        api.SessionForksView.as_view(),
        name="api_session_forks",
    ),
    path(
        "sessions/<uuid:session_id>/thread",
        api.SessionThreadView.as_view(),
        name="api_session_thread",
    ),
    path("runs", api.RunListView.as_view(), name="api_runs"),
    path("runs/<uuid:run_id>/context", api.RunContextView.as_view(), name="api_run_context"),
    path("runs/<uuid:run_id>", api.RunDetailView.as_view(), name="api_run"),
    path("runs/<uuid:run_id>/cancel", api.RunCancelView.as_view(), name="api_run_cancel"),
    path("runs/<uuid:run_id>/events", api.RunEventView.as_view(), name="api_run_events"),
    path("runs/<uuid:run_id>/decision", api.RunDecisionView.as_view(), name="api_run_decision"),
]
