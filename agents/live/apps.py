from django.apps import AppConfig


class LiveConfig(AppConfig):
    """Live progress over websockets (no models): its template tags and its subscriptions."""

    name = "agents.live"
    label = "live"
    verbose_name = "Live progress"

    def ready(self) -> None:
        # Registration needs the models loaded, which they are only once ready() runs.
        from agents.live import hooks

        hooks.register()
