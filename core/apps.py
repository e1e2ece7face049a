from django.apps import AppConfig


class CoreConfig(AppConfig):
    """What every app shares. An app only for the tables of shared plumbing (idempotency
    records); its code imports tenants and nothing above."""

    name = "core"
    label = "core"
    verbose_name = "Core"
    default_auto_field = "django.db.models.BigAutoField"
