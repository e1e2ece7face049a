"""Failures of the console's actions, each with a stable code."""

from __future__ import annotations

from typing import Any

from tenants.errors import AppError


class InvalidState(AppError):
    """Edited state that is not JSON or fails the agent's state schema: nothing is saved."""

    code = "invalid_state"
    message = "The state is not valid for this agent."

    def __init__(self, problems: list[str], *, syntax: Any = None) -> None:
        super().__init__(detail={"problems": problems})
        self.problems = problems
        self.syntax = syntax  # where the text stops being JSON (core.json_input.SyntaxProblem)

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "fields": {"state": self.problems}}


class NoSuchCheckpoint(AppError):
    code = "no_such_checkpoint"
    message = "The run has no checkpoint with that number."
