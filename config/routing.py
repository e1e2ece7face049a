"""Websocket routes: one live socket per page (agents/live/consumers.py, docs in README)."""

from django.urls import path

from agents.live.consumers import LiveConsumer

websocket_urlpatterns: list = [
    path("ws/live/", LiveConsumer.as_asgi()),
]
