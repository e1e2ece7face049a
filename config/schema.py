"""The OpenAPI schema at /api/schema/, built once per process, not at every request.

The schema is the code's (the public one: no permission filters it), yet drf-spectacular's view
builds it again for every GET: 0.2-0.3 s of CPU here, on a URL anyone may call. This view keeps
what it built by language: a `?lang=` Django has no translations for is the default language
(what the schema's text falls back to anyway), and a `?version=` is not read (the API has no
versions; drf-spectacular would only write the value into the schema's title), so a flood of
made-up values builds nothing again. It forgets it all when a setting changes (as tests do).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response

KEPT = 8  # (version, language) pairs kept per process, whatever the settings allow


class SchemaView(SpectacularAPIView):
    _built: ClassVar[dict[tuple[str | None, str | None], dict[str, Any]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def _get_schema_response(self, request):
        version = self.api_version or request.version  # no ?version= (see above)
        language = translation.get_language()
        if not translation.check_for_language(language):
            language = settings.LANGUAGE_CODE  # what its translations fall back to
        key = (version, language)
        schema = self._built.get(key)
        if schema is None:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            schema = generator.get_schema(request=request, public=self.serve_public)
            with self._lock:
                if len(self._built) < KEPT:
                    self._built[key] = schema
        disposition = f'inline; filename="{self._get_filename(request, version)}"'
        return Response(data=schema, headers={"Content-Disposition": disposition})


@receiver(setting_changed)
def _forget(**kwargs: Any) -> None:
    SchemaView._built.clear()
