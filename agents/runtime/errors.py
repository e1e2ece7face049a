"""Failures of the agents app, each with a stable code."""

from __future__ import annotations

from typing import Any

import psycopg
import redis
from django.db import InterfaceError, OperationalError

from core.errors import AppError

# Failures of the services a step runs on, never of the step: its attempt is retried once they
# answer again, and never counted against the step's retry budget.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)


class StepError(Exception):
    """Raised inside a step. Transient ones are retried with backoff; others fail the run."""

    code = "step_error"
    transient = False

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        self.retry_after = retry_after


class TransientStepError(StepError):
    """Worth retrying: 429, 5xx, timeouts, connection errors."""

    code = "transient"
    transient = True


class PermanentStepError(StepError):
    code = "permanent"


class LLMRateLimited(TransientStepError):
    code = "llm_rate_limited"


class LLMServerError(TransientStepError):
    code = "llm_server_error"


class LLMTimeout(TransientStepError):
    code = "llm_timeout"


class LLMConnectionError(TransientStepError):
    code = "llm_connection_error"


class LLMRequestRejected(PermanentStepError):
    """The provider refused the request itself (400, 401, 403, 404, 422): retrying won't help."""

    code = "llm_request_rejected"


class ToolFailed(PermanentStepError):
    code = "tool_failed"


class LedgerMismatch(PermanentStepError):
    """A replayed step made a side-effecting call other than the one the ledger recorded at
    its position: neither sending it (the service would answer the recorded request under
    the same key) nor answering it with the recorded outcome would be true."""

    code = "ledger_mismatch"


class ToolUnavailable(TransientStepError):
    code = "tool_unavailable"


# --- request errors (4xx for API and pages) -------------------------------------------------------


class UnknownAgent(AppError):
    code = "unknown_agent"
    message = "There is no agent with that name."


class UnknownStep(AppError):
    code = "unknown_step"
    message = "That agent has no step with that name."


class RunNotWaiting(AppError):
    code = "run_not_waiting"
    status = 409
    message = "The run is not waiting for that."


class DrivenElsewhere(AppError):
    """An action that needs AgentState to drive the run, on a LangGraph thread's run (its
    graph runs in its own process: agents/runtime/graph_runs.py)."""

    code = "run_driven_elsewhere"
    status = 409
    message = "This run is a LangGraph thread: its graph runs in its own process, not here."


class RunFinished(AppError):
    code = "run_finished"
    status = 409
    message = "The run has already finished."


class SessionBusy(AppError):
    code = "session_busy"
    status = 409
    message = "The agent is working on this conversation; try again when the step ends."


class StateMigrationFailed(AppError):
    code = "state_migration_failed"
    status = 422
    message = "The saved state could not be migrated to the agent's current state version."


class ForkPointInvalid(AppError):
    code = "fork_point_invalid"
    message = "The fork point is not a message of this conversation."


class RunChanged(AppError):
    """The run's version moved since the page was loaded: another admin or a worker acted."""

    code = "run_changed"
    status = 409
    message = "The run changed since you loaded this page; here is how it is now."


class ActionNotAllowed(AppError):
    code = "action_not_allowed"
    status = 409
    message = "This action does not apply to the run as it is now."


class AgentNotStartable(AppError):
    code = "agent_not_startable"
    message = "This agent's runs are started by the process that runs it."


class ThreadDrivenElsewhere(AppError):
    """A write to a LangGraph thread that another API key or person drives: from here the
    thread does not exist (its id says nothing about whose it is)."""

    code = "not_found"
    status = 404
    message = "No such thread for this key: another key or person drives it."


class ThreadsNotForMembers(AppError):
    code = "permission_denied"
    status = 403
    message = (
        "LangGraph threads are kept by API keys and staff; a member's session cannot write them."
    )


class InvalidAmount(AppError):
    code = "invalid_amount"
    message = "An amount is a positive number below 1,000,000,000,000 with at most two decimals."


class AmountMismatch(AppError):
    code = "amount_mismatch"
    message = "The interrupt's amount differs from the amount in its arguments."


class InvalidState(AppError):
    """An admin's edited state that is not JSON or fails the agent's state schema: nothing is
    saved."""

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
