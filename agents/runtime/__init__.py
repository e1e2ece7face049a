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

if TYPE_CHECKING:  # the same names, for type checkers (aliased: re-exported)
    from agents.runtime.definitions import Agent as Agent
    from agents.runtime.definitions import RetryPolicy as RetryPolicy
    from agents.runtime.definitions import RunSummary as RunSummary
    from agents.runtime.definitions import Transition as Transition
    from agents.runtime.definitions import fail as fail
    from agents.runtime.definitions import finish as finish
    from agents.runtime.definitions import goto as goto
    from agents.runtime.definitions import register as register
    from agents.runtime.definitions import sleep_until as sleep_until
    from agents.runtime.definitions import wait_for_approval as wait_for_approval
    from agents.runtime.definitions import wait_for_event as wait_for_event
    from agents.runtime.engine.step_context import StepContext as StepContext
    from agents.runtime.errors import PermanentStepError as PermanentStepError
    from agents.runtime.errors import StepError as StepError
    from agents.runtime.errors import ToolFailed as ToolFailed
    from agents.runtime.errors import ToolUnavailable as ToolUnavailable
    from agents.runtime.tool_agents import ToolAgent as ToolAgent
    from agents.runtime.tools import tool as tool

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
__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'agents.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
