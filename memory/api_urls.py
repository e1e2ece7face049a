"""REST endpoints of the memory app."""

from django.urls import path

from memory import api

app_name = "memory_api"

urlpatterns = [
    path("memory/subjects", api.SubjectLookupView.as_view(), name="api_memory_subject_lookup"),
    path(
        "memory/subjects/<int:subject_id>/facts",
        api.SubjectFactsView.as_view(),
        name="api_memory_facts",
    ),
    path(
        "memory/subjects/<int:subject_id>/facts:batch",
        api.SubjectFactsBatchView.as_view(),
        name="api_memory_facts_batch",
    ),
    path(
        "memory/subjects/<int:subject_id>/search",
        api.SearchView.as_view(),
        name="api_memory_search",
    ),
    path(
        "memory/subjects/<int:subject_id>/export",
        api.ExportView.as_view(),
        name="api_memory_export",
    ),
    path(
        "memory/subjects/<int:subject_id>/delete-all",
        api.DeleteAllView.as_view(),
        name="api_memory_delete_all",
    ),
    path(
        "memory/subjects/<int:subject_id>/privacy-link",
        api.PrivacyLinkView.as_view(),
        name="api_memory_privacy_link",
    ),
    path("memory/namespaces", api.NamespacesView.as_view(), name="api_memory_namespaces"),
    path("memory/facts/<uuid:fact_id>", api.FactView.as_view(), name="api_memory_fact"),
]
