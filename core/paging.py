"""Keyset pagination, and the opaque cursors that carry a page's end to the next request.

Each page starts after the row the previous one ended at, found with one row comparison
that an index answers as a range scan: page 200 costs what page 1 costs, and rows written
meanwhile neither repeat nor vanish.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import BooleanField, Model, QuerySet
from django.db.models.expressions import RawSQL

from core import json_input

M = TypeVar("M", bound=Model)
CursorPart = str | dt.datetime | uuid.UUID | None

# The usual order of a list: newest first, the id breaking ties between equal timestamps.
NEWEST_FIRST = ("-created_at", "-pk")


@dataclass
class Page(Generic[M]):
    rows: list[M]
    last: M | None  # the row the next page starts after; None on the last page


def paginate(
    rows: QuerySet[M], *, order: Sequence[str], after: Sequence[Any] | None, limit: int
) -> Page[M]:
    """One page of `rows` sorted by the fields `order` names (all ascending or all
    descending), starting after the row whose values of those fields are `after`."""
    rows = rows.order_by(*order)
    if after is not None:
        rows = rows.filter(_after(rows.model, order, after))
    found = list(rows[: limit + 1])
    page = found[:limit]
    return Page(rows=page, last=page[-1] if len(found) > limit else None)


def cursor_encode(*parts: CursorPart) -> str:
    """An opaque cursor holding `parts` (datetimes as ISO 8601, UUIDs as text)."""
    raw = json.dumps([_json_part(part) for part in parts], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(text: str) -> Any:
    """The JSON a cursor holds, checked like all outside JSON (core.json_input); a
    ValueError if `text` is not base64 of valid JSON."""
    padded = text + "=" * (-len(text) % 4)
    return json_input.loads(base64.urlsafe_b64decode(padded.encode()))


Position = tuple[dt.datetime, uuid.UUID]


def position_encode(created_at: dt.datetime, pk: uuid.UUID) -> str:
    """The cursor of a newest-first list's last row shown (pages and API lists alike)."""
    return cursor_encode(created_at, pk)


def position_decode(text: str) -> Position:
    """The (created_at, id) a `position_encode` cursor holds; ValueError if it holds none."""
    try:
        created_at, pk = cursor_decode(str(text))
        moment = dt.datetime.fromisoformat(created_at)
        position = (moment, uuid.UUID(pk))
    except (ValueError, TypeError, AttributeError):  # uuid.UUID(5): AttributeError
        raise ValueError(f"not a position: {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"not a position: {text!r} (a timestamp without its zone)")
    return position


# --- helpers --------------------------------------------------------------------------------------


def _after(model: type[Model], order: Sequence[str], values: Sequence[Any]) -> RawSQL:
    """`(a, b, c) > (x, y, z)` (`<` when descending): PostgreSQL seeks the index to the
    cursor instead of filtering every row before it, which an OR of column comparisons would
    make it do."""
    directions = {name.startswith("-") for name in order}
    if len(directions) != 1 or len(values) != len(order):
        raise ValueError("a keyset is one value per field, the fields sorted one way")
    table = model._meta.db_table
    columns = ", ".join(f'"{table}"."{_column(model, name.lstrip("-"))}"' for name in order)
    placeholders = ", ".join(["%s"] * len(values))
    op = "<" if directions.pop() else ">"
    return RawSQL(f"({columns}) {op} ({placeholders})", list(values), output_field=BooleanField())


def _column(model: type[Model], name: str) -> str:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    column = getattr(field, "column", None)
    if not column:
        raise ValueError(f"{model._meta.label}.{name} is not a column to page by")
    return column


def _json_part(part: CursorPart) -> str | None:
    if isinstance(part, dt.datetime):
        return part.isoformat()
    if isinstance(part, uuid.UUID):
        return str(part)
    return part
