"""Model instances from hand-written SQL, for the few hot paths where the ORM's compiling a
query costs more than the query (a LangGraph step: agents/web/langgraph_steps.py).

`columns(Model, "k")` is the select list of every concrete field of the model under alias
`k`; `instance(Model, values)` turns those values back into an instance exactly as the ORM
would (each field's database converter applied), so nothing downstream can tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def columns(model: type[models.Model], alias: str) -> str:
    return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)


def width(model: type[models.Model]) -> int:
    return len(model._meta.concrete_fields)


def instance(model: type[M], values: Sequence[Any]) -> M:
    fields = model._meta.concrete_fields
    converted = [
        field.from_db_value(value, None, connection)
        if value is not None and hasattr(field, "from_db_value")
        else value
        for field, value in zip(fields, values, strict=True)
    ]
    return model.from_db(connection.alias, [f.attname for f in fields], converted)
