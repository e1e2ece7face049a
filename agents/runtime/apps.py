from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """The runtime: runs, checkpoints, the ledger, the engine. The label stays `agents`, so
    its tables (agents_run, ...) and migration history are the ones it always had."""

    name = "agents.runtime"
    label = "agents"
    verbose_name = "Agent runtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ready(): registering the agent of external threads needs the models loaded.
        from agents.runtime import external  # noqa: F401  (registers the "langgraph" agent)
