from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registration needs the models loaded, which they are only once ready() runs.
        from memory import hooks

        hooks.register()
