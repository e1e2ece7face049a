from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RuntimeConfig(AppConfig):
    """The runtime: runs, checkpoints, the ledger, the engine. The label stays `agents`, so
    its tables (agents_run, ...) and migration history are the ones it always had."""

    name = "agents.runtime"
    label = "agents"
    verbose_name = "Agent runtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not above: registering the agent of external threads (the "langgraph" agent)
        # and the steps door's function need the models loaded.
        from agents.runtime import external, external_fast  # noqa: F401

        # The steps door's one-statement function, made again after every migrate.
        post_migrate.connect(external_fast.install, sender=self)
