"""Create an API key from a deploy script: the key alone on stdout, once; messages on stderr.

KEY=$(python manage.py api_key_create --tenant acme --name deploy --scope write)
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tenants import errors, services
from tenants.models import Role, Scope, Tenant
from tenants.principal import ROLE_SCOPES, Principal
from tenants.scope import system_scope, tenant_scope

ACTOR = "manage.py api_key_create"
NAME_MAX = 100
# Each level includes the ones below it, as the roles do: a write key can also read.
LEVELS = {
    Scope.READ.value: ROLE_SCOPES[Role.VIEWER],
    Scope.WRITE.value: ROLE_SCOPES[Role.MEMBER],
    Scope.ADMIN.value: ROLE_SCOPES[Role.ADMIN],
}


class Command(BaseCommand):
    help = (
        "Create an API key for a tenant and print it once, alone on stdout (messages go to"
        " stderr). --scope read, write (also reads) or admin (everything). Audited."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG")
        parser.add_argument("--name", required=True, help="what the key is for, e.g. deploy")
        parser.add_argument("--scope", required=True, metavar="|".join(LEVELS))
        parser.add_argument("--expires-in-days", type=int, metavar="N", help="default: never")

    def handle(
        self,
        *args,
        tenant: str,
        name: str,
        scope: str,
        expires_in_days: int | None,
        **options,
    ) -> None:
        if scope not in LEVELS:
            raise CommandError(f"--scope is one of {', '.join(LEVELS)}, not {scope!r}.")
        name = name.strip()
        if not name or len(name) > NAME_MAX:
            raise CommandError(f"--name needs 1 to {NAME_MAX} characters.")
        with system_scope("api_key_create_read"):
            found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"No tenant {tenant!r}.")
        # Nobody signed in: the key has no creator, and the audit log names this command.
        actor = Principal(tenant=found, scopes=frozenset(Scope.values))
        try:
            with tenant_scope(found.pk):
                created = services.api_key_create(
                    actor=actor,
                    name=name,
                    scopes=sorted(LEVELS[scope]),
                    expires_in_days=expires_in_days,
                    actor_label=ACTOR,
                )
        except errors.AppError as exc:
            raise CommandError(exc.message) from None
        key = created.key
        expiry = f"expires {key.expires_at:%Y-%m-%d %H:%M} UTC" if key.expires_at else "no expiry"
        self.stderr.write(
            f"Created API key {key.name!r} for {found.slug} (prefix {key.prefix}…,"
            f" scopes {', '.join(key.scopes)}, {expiry}). It is shown only this once."
        )
        self.stdout.write(created.raw)
