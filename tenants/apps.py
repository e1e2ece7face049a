from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ready(): the settings it checks are read once the app registry is loaded.
        from tenants import throttling

        # A mistyped rate must stop startup, not turn into a 500 on every API call.
        throttling.check_settings()
