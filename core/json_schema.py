"""JSON Schema (draft 2020-12) checks: a tool's arguments, an agent's state.

jsonschema is imported at the first check, not as a process starts: 0.2 s of every web,
worker and beat start, most of which never check a schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import ValidationError


def schema_errors(schema: dict[str, Any], instance: Any) -> list[ValidationError]:
    """Every way `instance` breaks `schema`, in the order of the places they are at."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    return sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
