"""Show or set a tenant's API rate limit overrides (they replace API_RATE_LIMIT_*)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants import services
from tenants.errors import NotFound
from tenants.models import Tenant
from tenants.rates import BUCKETS
from tenants.scope import system_scope
from tenants.throttling import SETTINGS


class Command(BaseCommand):
    help = (
        "Show a tenant's API rate limits, or override them: --write 10/min, --read off;"
        " --reset goes back to the settings. Audited."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug")
        for bucket in BUCKETS:
            parser.add_argument(f"--{bucket}", metavar="RATE", help="e.g. 1200/min, or off")
        parser.add_argument("--reset", action="store_true", help="drop every override")

    def handle(self, *args, slug: str, reset: bool, **options) -> None:
        with system_scope("tenant_rate_limits_read"):
            tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}.")
        given = {b: options[b] for b in BUCKETS if options.get(b) is not None}
        if reset or given:
            limits = {} if reset else {**tenant.api_rate_limits, **given}
            try:
                tenant = services.tenant_set_rate_limits(
                    slug=slug, limits=limits, actor_label="manage.py tenant_rate_limits"
                )
            except (ValidationError, NotFound) as exc:
                raise CommandError(" ".join(getattr(exc, "messages", [str(exc)]))) from exc
        overrides = tenant.api_rate_limits or {}
        for bucket in BUCKETS:
            source = "override" if bucket in overrides else "setting"
            rate = overrides.get(bucket) or getattr(settings, SETTINGS[bucket])
            self.stdout.write(f"{bucket}: {rate} ({source})")
