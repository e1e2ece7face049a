"""The API's JSON parser: every request body goes through core.json_input."""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework import parsers

from core import json_input
from core.errors import BadInput

# Where core.middleware.BadInputMiddleware leaves a body it already parsed and validated.
PARSED_BODY = "_core_parsed_json"
_MISSING = object()


def parse_body(raw: bytes, encoding: str = "utf-8") -> Any:
    """A JSON request body in the charset its Content-Type names, parsed and validated."""
    if codecs.lookup(encoding).name != "utf-8":
        try:
            return json_input.loads(raw.decode(encoding))
        except UnicodeDecodeError:
            raise BadInput(f"The request body is not {encoding} text.") from None
    return json_input.loads(raw)


class JSONParser(parsers.JSONParser):
    """DRF's JSONParser with the checks of core.json_input: a NUL character, a lone
    surrogate or too deep nesting is a 400 naming the field, never a 500."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        parser_context = parser_context or {}
        request = getattr(parser_context.get("request"), "_request", None)
        parsed = getattr(request, PARSED_BODY, _MISSING)
        if parsed is not _MISSING:
            return parsed
        encoding = parsers.get_encoding(parser_context)
        return parse_body(stream.read(), encoding)
