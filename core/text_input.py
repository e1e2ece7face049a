"""Characters PostgreSQL cannot store, in plain text: query strings, form fields, paths.

A NUL character fails in PostgreSQL ("A string literal cannot contain NUL characters") and a
lone surrogate cannot even be encoded by psycopg: either is a 500 once it reaches a query.
core.json_input applies the same check to every string of a JSON document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl

from django.conf import settings

from core.errors import InvalidCharacters

NON_FIELD = "non_field_errors"

BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def character_problem(value: str) -> str | None:
    """What is wrong with the characters of `value`, in words, or None."""
    found = BAD_CHARACTER.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "Contains a NUL character (\\u0000), which is not allowed."
    return f"Contains a lone surrogate ({_escape(found.group())}), which is not valid Unicode."


def printable(text: str) -> str:
    """`text` with NUL and lone surrogates written as \\uXXXX: safe to put in an answer (a
    lone surrogate cannot even be encoded as UTF-8)."""
    return BAD_CHARACTER.sub(lambda m: _escape(m.group()), text)


def check_text(value: str, *, field: str) -> None:
    """Refuse a NUL character or a lone surrogate in one text field."""
    problem = character_problem(value)
    if problem:
        raise InvalidCharacters(fields={printable(field) or NON_FIELD: [problem]})


def check_query_string(
    raw: str, *, what: str = "The query string", encoding: str = "utf-8"
) -> None:
    """Refuse a NUL, a lone surrogate or bytes that are not UTF-8 (percent-encoded) in the
    keys or values of a query string or urlencoded form."""
    if not raw:
        return
    try:
        pairs = parse_qsl(
            raw,
            keep_blank_values=True,
            encoding=encoding,
            errors="strict",
            max_num_fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS,
        )
    except UnicodeDecodeError:
        raise not_utf8(what) from None
    except (ValueError, LookupError):
        return  # too many fields or an unknown charset: Django refuses it when it parses
    check_pairs(pairs)


def check_pairs(pairs: Iterable[tuple[str, str]]) -> None:
    """Refuse bad characters in (name, value) pairs, naming every field that has them."""
    fields: dict[str, list[str]] = {}
    for key, value in pairs:
        problem = character_problem(key) or character_problem(value)
        if problem:
            fields.setdefault(printable(key) or NON_FIELD, [problem])
    if fields:
        names = ", ".join(sorted(fields))
        raise InvalidCharacters(f"Characters that are not allowed in: {names}.", fields=fields)


def not_utf8(what: str) -> InvalidCharacters:
    return InvalidCharacters(f"{what} is not UTF-8 text.", fields={NON_FIELD: ["Not UTF-8 text."]})


def _escape(char: str) -> str:
    return f"\\u{ord(char):04x}"
