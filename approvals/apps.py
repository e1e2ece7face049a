from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registration needs the models loaded, which they are only once ready() runs.
        from approvals import hooks

        hooks.register()
