"""Console pages of the memory app: the privacy page, its actions, the tenant's settings."""

from django.urls import path

from memory.privacy import views, views_assistant

app_name = "memory"

urlpatterns = [
    path("memory/", views.privacy, name="my_memory"),
    path("memory/export/", views.export, name="memory_export"),
    path("memory/delete-all/", views.delete_all, name="memory_delete_all"),
    path("memory/facts/<uuid:fact_id>/edit/", views.fact_edit, name="memory_fact_edit"),
    path("memory/facts/<uuid:fact_id>/delete/", views.fact_delete, name="memory_fact_delete"),
    path("memory/assistant/tokens/", views_assistant.token_create, name="assistant_token_create"),
    path(
        "memory/assistant/tokens/<uuid:token_id>/revoke/",
        views_assistant.token_revoke,
        name="assistant_token_revoke",
    ),
    path("memory/settings/", views.memory_settings, name="memory_settings"),
    path("memory/link/<str:token>/", views.privacy_link, name="memory_link"),
]
