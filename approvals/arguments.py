"""The arguments of a proposed action: checked against the tool's JSON schema, shown readably.

The same check serves every way of deciding (inbox, run page, both APIs), because
`approval_decide` calls it; `arguments_problems` returns the field map the API reports.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.runtime.definitions import all_agents
from agents.runtime.errors import ToolFailed
from agents.runtime.tools import get_tool
from approvals.errors import InvalidArguments
from core.json_schema import schema_errors

if TYPE_CHECKING:
    import jsonschema

SCALAR_TYPES = {"string", "number", "integer", "boolean"}


def _tool(action: str) -> Any:
    """The registered tool named `action`, or None."""
    # Tools register when their agent's module is imported; a web process may not have
    # imported any yet, and an unknown tool would validate nothing.
    all_agents()
    try:
        return get_tool(action)
    except ToolFailed:
        return None


def tool_schema(action: str) -> dict[str, Any]:
    """The JSON schema of the tool named `action`; any object for an unknown tool."""
    tool = _tool(action)
    return (tool.parameters if tool else None) or {"type": "object"}


def tool_description(action: str) -> str:
    tool = _tool(action)
    return tool.description if tool else ""


def arguments_problems(action: str, arguments: Any, *, example: Any = None) -> dict[str, list[str]]:
    """Schema violations by field ("non_field_errors" for the object as a whole), in words a
    person can act on; `example` (the proposed arguments, which passed) shows the format."""
    problems: dict[str, list[str]] = {}
    for error in schema_errors(tool_schema(action), arguments):
        where = ".".join(str(part) for part in error.path) or "non_field_errors"
        problems.setdefault(where, []).append(_explain(error, example))
    return problems


def _explain(error: jsonschema.ValidationError, example: Any) -> str:
    field = str(error.path[-1]) if error.path else ""
    shown = example.get(field) if isinstance(example, dict) and field else None
    if error.validator == "pattern":
        hint = f", like {shown}" if isinstance(shown, str) else ""
        return f"{json.dumps(error.instance)} is not in the expected format{hint}."
    if error.validator == "minLength" and error.validator_value == 1:
        return "This cannot be empty."
    if error.validator == "type":
        return f"This must be a {error.validator_value}, not {json.dumps(error.instance)}."
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing.")
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "Unknown arguments")
    return error.message


def arguments_check(action: str, arguments: Any, *, example: Any = None) -> None:
    """Raise InvalidArguments (400) unless `arguments` satisfy the tool's schema."""
    problems = arguments_problems(action, arguments, example=example)
    if problems:
        raise InvalidArguments(problems)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def readable(arguments: Any) -> list[tuple[str, str]]:
    """(name, value) rows for a table: scalars as they are, nested values as compact JSON."""
    if not isinstance(arguments, dict):
        return [("value", pretty(arguments))]
    rows = []
    for key in sorted(arguments):
        value = arguments[key]
        if isinstance(value, str):
            shown = value
        elif value is None or isinstance(value, bool | int | float):
            shown = json.dumps(value)
        else:
            shown = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        rows.append((str(key), shown))
    return rows


@dataclass(frozen=True)
class EditableField:
    """One input of the 'edit and approve' form, for a flat object schema."""

    name: str
    type: str
    value: str
    required: bool
    description: str
    pattern: str


def editable_fields(action: str, arguments: dict[str, Any]) -> list[EditableField] | None:
    """One input per argument when the tool's schema is a flat object; None: edit as JSON."""
    schema = tool_schema(action)
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict) or not properties:
        return None
    if any(p.get("type") not in SCALAR_TYPES for p in properties.values()):
        return None
    if any(key not in properties for key in arguments):
        return None  # the agent sent more than the schema names: only JSON shows it all
    required = set(schema.get("required", []))
    fields = []
    for name, spec in properties.items():
        value = arguments.get(name)
        fields.append(
            EditableField(
                name=name,
                type=spec["type"],
                value="" if value is None else (value if isinstance(value, str) else str(value)),
                required=name in required,
                description=spec.get("description", ""),
                pattern=spec.get("pattern", ""),
            )
        )
    return fields


def coerce(fields: list[EditableField], submitted: dict[str, str]) -> dict[str, Any]:
    """Typed arguments from the form's strings; a value that does not parse stays a string,
    so the schema check reports it against the field rather than the form guessing."""
    result: dict[str, Any] = {}
    for field in fields:
        raw = submitted.get(field.name, "")
        if raw == "" and not field.required:
            continue
        result[field.name] = _typed(field.type, raw)
    return result


def _typed(kind: str, raw: str) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            number = float(raw)
            if not math.isfinite(number):  # "nan", "1e999": JSON (and jsonb) has no such number
                return raw
            return int(number) if number.is_integer() and "." not in raw else number
    except ValueError:
        return raw
    if kind == "boolean":
        return {"true": True, "false": False}.get(raw.strip().lower(), raw)
    return raw
