"""Tools agents call. Side-effecting tools go through the ledger; the rest are plain calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.runtime.errors import ToolFailed


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    side_effects: bool = False
    description: str = ""
    # JSON schema of the arguments: shown to the model and used to validate edited arguments.
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_TOOLS: dict[str, Tool] = {}
_NAMES: dict[Callable[..., Any], str] = {}  # a tool's function: its name


def tool(
    name: str | None = None,
    *,
    side_effects: bool = False,
    description: str = "",
    parameters: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a tool. A side-effecting tool receives `idempotency_key=`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        known = _TOOLS.get(name or fn.__name__)
        if known is not None and _origin(known.fn) != _origin(fn):
            raise ValueError(f"A tool named {known.name!r} is already registered.")
        _NAMES[fn] = name or fn.__name__
        _TOOLS[name or fn.__name__] = Tool(
            name=name or fn.__name__,
            fn=fn,
            side_effects=side_effects,
            description=description or (fn.__doc__ or "").strip(),
            parameters=parameters or {"type": "object"},
        )
        return fn

    return register


def _origin(fn: Callable[..., Any]) -> tuple[str, str]:
    # The same function imported again (a reloaded module) is not a second tool.
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def tool_name(ref: str | Callable[..., Any]) -> str:
    """The name of a tool given by name or by its decorated function."""
    if isinstance(ref, str):
        return ref
    try:
        return _NAMES[ref]
    except (KeyError, TypeError):
        raise ToolFailed(f"{ref!r} is not a registered tool (decorate it with @tool)") from None


def get_tool(name: str | Callable[..., Any]) -> Tool:
    name = tool_name(name)
    try:
        return _TOOLS[name]
    except KeyError:
        raise ToolFailed(f"no tool named {name!r}") from None


def all_tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)
