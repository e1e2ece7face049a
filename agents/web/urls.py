"""Console pages of the agents app (runs, conversations and their chat, agent registry)."""

from django.urls import path

from agents.presenters import trends
from agents.web import chat, views

app_name = "agents"

urlpatterns = [
    path("runs/", views.run_list, name="runs"),
    path("runs/start/", views.run_start, name="run_start"),
    path("runs/charts/", trends.runs_charts_view, name="runs_charts"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path(
        "runs/<uuid:run_id>/approvals/<uuid:approval_id>/decide/",
        views.run_approval_decide,
        name="run_approval_decide",
    ),
    path("runs/<uuid:run_id>/context/", views.run_context, name="run_context"),
    path("conversations/", views.conversation_list, name="conversations"),
    path("conversations/new/", chat.chat_start, name="chat_start"),
    path(
        "conversations/<uuid:session_id>/",
        views.conversation_detail,
        name="conversation_detail",
    ),
    path(
        "conversations/<uuid:session_id>/fork/",
        views.conversation_fork,
        name="conversation_fork",
    ),
    path(
        "conversations/<uuid:session_id>/messages/",
        chat.chat_reply,
        name="chat_reply",
    ),
    path("agents/", views.agent_list, name="agents"),
]
