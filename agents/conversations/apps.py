from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    """Conversations and context packing. Its tables (sessions, messages, packed contexts) are
    the runtime's; this app keeps their derived state and registers `ctx.pack`."""

    name = "agents.conversations"
    label = "conversations"
    verbose_name = "Conversations"

    def ready(self) -> None:
        # Registration needs the models loaded, which they are only once ready() runs.
        from agents.conversations import hooks

        hooks.register()
