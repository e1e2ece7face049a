from django.apps import AppConfig


class LiveConfig(AppConfig):
    """Live progress over websockets (no models): its template tags and its subscriptions."""

    name = "agents.live"
    label = "live"
    verbose_name = "Live progress"
