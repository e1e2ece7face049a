"""Websocket routes. Live progress (issue 5) adds its consumers here."""

websocket_urlpatterns: list = []
