"""What memory registers with the runtime: `ctx.memory` for steps, and the retrieval that
context packing uses when memory is installed."""

from __future__ import annotations

from agents.runtime import extensions
from memory import selectors
from memory.facts.steps import StepMemory


def register() -> None:
    extensions.register_step_extension("memory", StepMemory)
    extensions.register_provider("memory.facts_for_context", selectors.facts_for_context)
