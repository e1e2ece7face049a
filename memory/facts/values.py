"""A fact whose content is a JSON object (the LangGraph store's items): kept exactly as given in
`MemoryFact.value`, with a text derived from it so that it stays a first-class memory (full
text and embeddings search it, the privacy page shows it, the packer quotes it).

The derived text is one line per leaf, `path: leaf` (`address.city: Lyon`, `tags: a, b`); a
top-level "text" string comes first, unlabelled. It is searched, never parsed back: `value`
is what a reader of the fact gets.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core import json_input
from memory import errors
from memory.facts.secrets import secret_kind

MAX_VALUE_BYTES = 16_384  # the value as compact UTF-8 JSON
MAX_VALUE_DEPTH = 16  # objects and arrays inside one another
MAX_DERIVED_TEXT = 20_000  # characters of derived text (paths repeat on every leaf)
LONG_LEAF = 160  # characters after which the privacy page folds a leaf
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Cleaned:
    value: dict[str, Any]
    text: str
    normalized: str  # the dedupe key: the same JSON (whatever its key order) is the same fact


def clean_value(value: Any) -> Cleaned:
    """The value as stored, its derived text and dedupe key; or the error that says why not
    (not an object, too deep, bad characters, too large, a secret anywhere inside)."""
    if not isinstance(value, dict):
        raise errors.InvalidValue()
    json_input.validate(value, root="value", depth=MAX_VALUE_DEPTH)
    try:
        compact = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise errors.InvalidValue() from None
    size = len(compact.encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        raise errors.ValueTooLarge(
            f"A fact's value is at most {MAX_VALUE_BYTES:,} bytes as JSON; this one is {size:,}.",
            detail={"limit": MAX_VALUE_BYTES, "size": size},
        )
    lines = [_line(label, leaf) for label, leaf in leaves(value)]
    for label, leaf in leaves(value):
        for part in (label, leaf, _line(label, leaf)):
            kind = secret_kind(part)
            if kind is not None:
                raise errors.SecretRefused(detail={"kind": kind})
    text = "\n".join(lines) or "{}"
    kind = secret_kind(text)  # a secret split over two leaves
    if kind is not None:
        raise errors.SecretRefused(detail={"kind": kind})
    canonical = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return Cleaned(value=value, text=text[:MAX_DERIVED_TEXT], normalized=f"json:{digest}")


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, leaf as text) of every leaf, in the value's order; a list of plain values is
    one leaf (`tags: a, b`), an empty object or list is `{}` / `[]`. A top-level "text" comes
    first."""
    if not path and isinstance(value, dict) and "text" in value:  # the text first
        value = {"text": value["text"], **value}
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:  # no recursion: depth is bounded, but a stack costs nothing
        here, item = stack.pop()
        if isinstance(item, dict):
            if not item:
                yield here, "{}"
            children = [(_join(here, str(k)), v) for k, v in item.items()]
            stack.extend(reversed(children))
        elif isinstance(item, list):
            if all(not isinstance(v, dict | list) for v in item):
                yield here, ", ".join(scalar(v) for v in item) if item else "[]"
            else:
                stack.extend(reversed([(f"{here}[{i}]", v) for i, v in enumerate(item)]))
        else:
            yield here, scalar(item)


def scalar(item: Any) -> str:
    if isinstance(item, str):
        return item
    return json.dumps(item, ensure_ascii=False)  # true, null, 3.5


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _line(label: str, leaf: str) -> str:
    leaf = _SPACE.sub(" ", leaf).strip()
    return leaf if label in ("", "text") else f"{label}: {leaf}"


@dataclass(frozen=True)
class Row:
    """One line of a value on the privacy page."""

    label: str
    text: str
    short: str  # `text`, cut at LONG_LEAF characters (the page folds the rest)

    @property
    def long(self) -> bool:
        return self.short != self.text


def rows(value: dict[str, Any], text: str = "") -> list[Row]:
    """The value as the privacy page shows it: `label: text` lines, long leaves cut, in the
    writer's order. PostgreSQL's jsonb keeps an object's keys in an order of its own, so the
    order is read back from the derived `text`, written in the writer's (a line it cannot
    place, e.g. past the text's cut, goes last)."""
    order: dict[str, int] = {}
    for index, line in enumerate(text.split("\n")):
        order.setdefault(line.split(": ", 1)[0] if ": " in line else "text", index)
    out = []
    for label, leaf in leaves(value):
        short = leaf if len(leaf) <= LONG_LEAF else leaf[:LONG_LEAF].rstrip() + "…"
        out.append(Row(label="" if label == "text" else label, text=leaf, short=short))
    last = len(order)
    out.sort(key=lambda row: 0 if not row.label else order.get(row.label, last))
    return out
