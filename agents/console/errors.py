"""Failures of the console's actions, each with a stable code."""

from __future__ import annotations

from typing import Any

from tenants.errors import AppError


class RunChanged(AppError):
    """The run's version moved since the page was loaded: another admin or a worker acted."""

    code = "run_changed"
    status = 409
    message = "The run changed since you loaded this page; here is how it is now."


class ActionNotAllowed(AppError):
    code = "action_not_allowed"
    status = 409
    message = "This action does not apply to the run as it is now."


class InvalidState(AppError):
    """Edited state that is not JSON or fails the agent's state schema: nothing is saved."""

    code = "invalid_state"
    message = "The state is not valid for this agent."

    def __init__(self, problems: list[str]) -> None:
        super().__init__(detail={"problems": problems})
        self.problems = problems

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "fields": {"state": self.problems}}


class NoSuchCheckpoint(AppError):
    code = "no_such_checkpoint"
    message = "The run has no checkpoint with that number."
