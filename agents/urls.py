"""Console pages of the agents app (runs list, run page, starting a run)."""

from django.urls import path  # noqa: F401

urlpatterns: list = []
