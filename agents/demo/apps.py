from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo: the refund desk agents, their scripted model and the demo payments provider,
    whose ledger (`DemoRefund`) is this app's one table."""

    name = "agents.demo"
    label = "demo"
    verbose_name = "Demo"
