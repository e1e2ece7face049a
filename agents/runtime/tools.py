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


def tool(
    name: str | None = None,
    *,
    side_effects: bool = False,
    description: str = "",
    parameters: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a tool. A side-effecting tool receives `idempotency_key=`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _TOOLS[name or fn.__name__] = Tool(
            name=name or fn.__name__,
            fn=fn,
            side_effects=side_effects,
            description=description or (fn.__doc__ or "").strip(),
            parameters=parameters or {"type": "object"},
        )
        return fn

    return register


def get_tool(name: str) -> Tool:
    try:
        return _TOOLS[name]
    except KeyError:
        raise ToolFailed(f"no tool named {name!r}") from None


def all_tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)
