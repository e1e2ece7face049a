"""Load the demo tenant `acme` (and `globex`, so the tenant switcher has something to do)."""

from __future__ import annotations

import json
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from tenants import services
from tenants.models import Role, Tenant
from tenants.scope import system_scope

DEMO_USERS = [
    ("admin", Role.ADMIN, "Ada Admin"),
    ("manager", Role.MANAGER, "Max Manager"),
    ("viewer", Role.VIEWER, "Vic Viewer"),
    ("alice", Role.MEMBER, "Alice Customer"),
    ("bob", Role.MEMBER, "Bob Customer"),
]


class Command(BaseCommand):
    help = "Create the demo tenants and users (idempotent). Prints credentials in demo mode."

    def handle(self, *args, **options) -> None:
        credentials = self._credentials()
        with transaction.atomic():
            acme = self._tenant("acme", "Acme Corp")
            globex = self._tenant("globex", "Globex")
            User = get_user_model()
            for username, role, full_name in DEMO_USERS:
                user = User.objects.filter(username=username).first()
                if user is None:
                    first, last = full_name.split(" ", 1)
                    user = services.user_create(
                        username=username,
                        password=credentials[username],
                        email=f"{username}@acme.example",
                        first_name=first,
                        last_name=last,
                    )
                services.membership_add(tenant=acme, user=user, role=role, actor_label="seed_demo")
            admin = User.objects.get(username="admin")
            services.membership_add(
                tenant=globex, user=admin, role=Role.VIEWER, actor_label="seed_demo"
            )
        self.stdout.write(self.style.SUCCESS("Demo tenants ready: acme, globex."))
        if settings.DEMO:
            self.stdout.write("Demo logins (tenant acme):")
            for username, role, _ in DEMO_USERS:
                self.stdout.write(f"  {username:<8} {credentials[username]:<24} {role}")

    def _tenant(self, slug: str, name: str) -> Tenant:
        with system_scope("demo_seed"):
            tenant = Tenant.objects.filter(slug=slug).first()
        return tenant or services.tenant_create(slug=slug, name=name, actor_label="seed_demo")

    def _credentials(self) -> dict[str, str]:
        # Random per installation, kept (0600) under var/ so they can be printed each run.
        path = settings.VAR_DIR / "demo-credentials.json"
        if path.exists():
            return json.loads(path.read_text())
        creds = {username: secrets.token_urlsafe(9) for username, _, _ in DEMO_USERS}
        path.write_text(json.dumps(creds))
        path.chmod(0o600)
        return creds
