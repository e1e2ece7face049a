#!/usr/bin/env python
"""Django's command line. In a checkout whose embedded servers are set up (`make run`), a
command without DATABASE_URL uses them (config.embedded.for_command); a missing or bad
setting is one line on stderr naming it, not a traceback."""

import os
import sys


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from config import embedded

    with embedded.for_command():
        from django.conf import settings

        try:
            settings.INSTALLED_APPS  # noqa: B018  (loads the settings, which check themselves)
        except ImproperlyConfigured as exc:
            hint = ""
            if not os.environ.get("DATABASE_URL") and not embedded.is_set_up():
                hint = (
                    " (no DATABASE_URL, and no embedded servers in this checkout: set"
                    " DATABASE_URL, REDIS_URL and SECRET_KEY, or run `make services-up` once)"
                )
            print(f"manage.py: {exc}{hint}", file=sys.stderr)
            return 2
        execute_from_command_line(sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
