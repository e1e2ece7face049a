"""The agent-author API, in one import:

    from agents.runtime import Agent, StepContext, Transition, finish, goto, register, tool

Steps and tools are named by their functions (or their names); `register` makes an agent (or a
ToolAgent) runnable and refuses a second one under a taken name. See docs/agents.md.

The names load on first use (this package is also the Django app holding the engine's models,
imported before the app registry is ready).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.runtime.definitions import (
        Agent,
        RetryPolicy,
        RunSummary,
        Transition,
        fail,
        finish,
        goto,
        register,
        sleep_until,
        wait_for_approval,
        wait_for_event,
    )
    from agents.runtime.engine.step_context import StepContext
    from agents.runtime.errors import PermanentStepError, StepError, ToolFailed, ToolUnavailable
    from agents.runtime.tool_agents import ToolAgent
    from agents.runtime.tools import tool

_HOMES = {
    "agents.runtime.definitions": (
        "Agent",
        "RetryPolicy",
        "RunSummary",
        "Transition",
        "fail",
        "finish",
        "goto",
        "register",
        "sleep_until",
        "wait_for_approval",
        "wait_for_event",
    ),
    "agents.runtime.engine.step_context": ("StepContext",),
    "agents.runtime.errors": ("PermanentStepError", "StepError", "ToolFailed", "ToolUnavailable"),
    "agents.runtime.tool_agents": ("ToolAgent",),
    "agents.runtime.tools": ("tool",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = [
    "Agent",
    "PermanentStepError",
    "RetryPolicy",
    "RunSummary",
    "StepContext",
    "StepError",
    "ToolAgent",
    "ToolFailed",
    "ToolUnavailable",
    "Transition",
    "fail",
    "finish",
    "goto",
    "register",
    "sleep_until",
    "tool",
    "wait_for_approval",
    "wait_for_event",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'agents.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
