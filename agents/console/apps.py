from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The admin console (no models): stuck runs, repairs, and the stuck-run beat task."""

    name = "agents.console"
    label = "console"
    verbose_name = "Admin console"
