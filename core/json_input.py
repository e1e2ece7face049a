"""The one parser and validator for JSON that comes from outside (API bodies, form fields that
hold JSON, keyset cursors, websocket messages).

Refused, with the path of the field where possible (`input.m`, `items[3].k`):
- text that is not UTF-8, not JSON, or holds NaN/Infinity or a number too large for a float
  (PostgreSQL's jsonb stores none of them, and a 500 would follow);
- a NUL character or a lone surrogate in any string, key or value, at any depth (PostgreSQL
  cannot store a NUL in text or jsonb, and psycopg cannot encode a lone surrogate);
- nesting deeper than `settings.MAX_JSON_DEPTH` (32 by default): counted on the text before
  parsing, so 100,000 `[` cost one linear scan and never reach the recursive parser.

Nothing here recurses: depth and characters are checked with explicit stacks.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.errors import BadInput, InvalidCharacters, TooDeep
from core.text_input import BAD_CHARACTER, NON_FIELD, character_problem, printable

DEFAULT_MAX_DEPTH = 32
# A string token, or an unterminated one up to the end of the text: the unrolled loop cannot
# backtrack, so removing the strings is linear even for text made of escaped quotes.
_STRING = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:"|\\?\Z)')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# The escapes that can make a NUL or a lone surrogate (or a false alarm: an escaped backslash
# before "u0000", or a surrogate pair, sends the document to the full check).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def max_depth() -> int:
    return getattr(settings, "MAX_JSON_DEPTH", DEFAULT_MAX_DEPTH)


def loads(data: str | bytes | bytearray, *, root: str = "", depth: int | None = None) -> Any:
    """Parse JSON text and validate it; raise BadInput (a ValueError) naming what is wrong."""
    limit = max_depth() if depth is None else depth
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("The JSON is not UTF-8 text.") from None
    else:
        text = data
    _check_text_depth(text, limit)
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:  # only if the scan above missed something; never a 500
        raise TooDeep(_too_deep_message(limit)) from None
    except json.JSONDecodeError as exc:
        problem = syntax_problem(text, exc)
        raise BadInput(f"Not valid JSON: {exc}.", reason=str(exc), syntax=problem) from None
    except ValueError as exc:
        raise BadInput(f"Not valid JSON: {exc}.", reason=str(exc)) from None
    # A NUL or a lone surrogate reaches a parsed string only from the text itself or from an
    # escape: without either, every string is good and the walk over them is skipped. (The
    # depth was counted on the text above.)
    if BAD_CHARACTER.search(text) or _RISKY_ESCAPE.search(text):
        validate(value, root=root, depth=limit)
    return value


def validate(value: Any, *, root: str = "", depth: int | None = None) -> None:
    """Check an already parsed value (dicts, lists, strings...) like `loads` does."""
    limit = max_depth() if depth is None else depth
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, level = stack.pop()
        if isinstance(item, str):
            _check_string(item, root, path)
            continue
        if isinstance(item, dict):
            children: list[tuple[str | int, Any]] = list(item.items())
        elif isinstance(item, list | tuple):
            children = list(enumerate(item))
        else:
            continue
        if level + 1 > limit:
            raise TooDeep(_too_deep_message(limit), fields={field_path(root, path): [_deep(limit)]})
        # Reversed onto the stack, so the first problem reported is the first in the document.
        for key, child in reversed(children):
            if isinstance(key, str):
                _check_string(key, root, (*path, key), is_key=True)
            stack.append((child, (*path, key), level + 1))


def field_path(root: str, path: tuple[str | int, ...]) -> str:
    """`input.m`, `items[3].k`; NON_FIELD for the document itself."""
    text = root
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{printable(part)}" if text else printable(part)
    return text or NON_FIELD


# --- syntax errors, for a person -----------------------------------------------------------------

# The parser's words (json.JSONDecodeError.msg) in plain ones, said of the spot it stopped at.
SYNTAX_WORDS = {
    "Expecting value": "A value was expected here: a string in double quotes, a number, true, "
    "false, null, an object {…} or an array […].",
    "Expecting ',' delimiter": "A comma (,) or a closing bracket is missing before this.",
    "Expecting ':' delimiter": "A colon (:) is missing between the key and this.",
    "Expecting property name enclosed in double quotes": "A key in double quotes was expected "
    'here (JSON has no comma after the last item, and writes keys like "name").',
    "Illegal trailing comma before end of object": "JSON has no comma after the last item.",
    "Illegal trailing comma before end of array": "JSON has no comma after the last item.",
    "Unterminated string starting at": "This string has no closing double quote.",
    "Invalid control character at": "A string cannot hold a raw line break or tab: write \\n "
    "or \\t.",
    "Invalid \\escape": "This backslash escape is not one JSON knows (\\\\ writes a backslash).",
    "Invalid \\uXXXX escape": "\\u must be followed by four hexadecimal digits.",
    "Extra data": "The JSON value ends before this: remove what follows, or put it all in one "
    "object or array.",
}
EXCERPT_WIDTH = 80  # characters of a long line shown around the spot,
EXCERPT_BEFORE = 24  # at most this many before it (so that a phone shows the spot too)


@dataclass(frozen=True)
class SyntaxProblem:
    """Where JSON text stops being JSON: what was expected, the line and column (from 1),
    the line (around the spot, if long) and a marker to show under it (`^`)."""

    message: str
    line: int
    column: int
    excerpt: str
    marker: str

    def __str__(self) -> str:
        return f"Line {self.line}, column {self.column}: {self.message}"

    @property
    def pad_before_spot(self) -> str:
        """The marker without its caret: what goes before the spot."""
        return self.marker[:-1]

    @property
    def pad(self) -> str:
        """As wide as the line number (to put the marker's line in step with the excerpt)."""
        return " " * len(str(self.line))


def syntax_problem(text: str, exc: json.JSONDecodeError) -> SyntaxProblem:
    """The parser's complaint about `text`, said for a person."""
    message = SYNTAX_WORDS.get(exc.msg, exc.msg[:1].upper() + exc.msg[1:] + ".")
    lines = text.split("\n")
    line = lines[exc.lineno - 1].rstrip("\r") if exc.lineno <= len(lines) else ""
    at = exc.colno - 1
    start = 0
    if len(line) > EXCERPT_WIDTH:
        start = max(0, min(at - EXCERPT_BEFORE, len(line) - EXCERPT_WIDTH))
    end = start + EXCERPT_WIDTH
    excerpt = ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")
    # Tabs stay tabs, so the marker sits under the spot however wide they are drawn.
    pad = "".join(c if c == "\t" else " " for c in line[start:at])
    marker = (" " if start else "") + pad + "^"
    return SyntaxProblem(message, exc.lineno, exc.colno, excerpt, marker)


# --- helpers --------------------------------------------------------------------------------------


def _check_string(
    value: str, root: str, path: tuple[str | int, ...], *, is_key: bool = False
) -> None:
    problem = character_problem(value)
    if problem:
        where = "The key" if is_key else "The value"
        message = f"{where} at {field_path(root, path)} contains characters that are not allowed."
        raise InvalidCharacters(message, fields={field_path(root, path): [problem]})


def _check_text_depth(text: str, limit: int) -> None:
    if text.count("[") + text.count("{") <= limit:
        return  # the usual case: it cannot be too deep, skip the scan
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    level = 0
    for char in brackets:
        if char in "[{":
            level += 1
            if level > limit:
                raise TooDeep(_too_deep_message(limit))
        else:
            level -= 1


def _too_deep_message(limit: int) -> str:
    return f"The JSON is nested deeper than {limit} levels."


def _deep(limit: int) -> str:
    return f"Nested deeper than {limit} levels."


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is too large")
    return value
