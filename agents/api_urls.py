"""REST endpoints of the agents app."""

from django.urls import path  # noqa: F401

urlpatterns: list = []
