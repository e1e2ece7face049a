"""Pages of the admin console, mounted at /console/."""

from django.urls import path

from agents.console import confirmations, views

app_name = "console"

urlpatterns = [
    path("", views.run_list, name="console_runs"),
    path("summary/", views.run_summary, name="console_summary"),
    path("charts/", views.run_charts, name="console_charts"),
    path("recovered/", views.run_recovered, name="console_recovered"),
    path("runs/bulk/", views.run_bulk, name="console_bulk"),
    path("runs/<uuid:run_id>/", views.run_detail, name="console_run"),
    path("runs/<uuid:run_id>/<slug:action>/", views.run_action, name="console_action"),
    path(
        "runs/<uuid:run_id>/<slug:action>/confirm/",
        confirmations.confirm_action,
        name="console_confirm",
    ),
]
