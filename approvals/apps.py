from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.live.render import register_feed
        from approvals.live import approvals_feed

        register_feed("approvals", approvals_feed)  # the inbox, its badge, a request's page
