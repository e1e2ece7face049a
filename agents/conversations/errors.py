"""Failures of context assembly, each with a stable code (API answers and failed steps)."""

from __future__ import annotations

from core.errors import AppError


class ContextBudgetExceeded(AppError):
    """The items that must be sent (system prompt, current turn) do not fit the budget.

    Raised in a step it fails the run with this code: retrying would not make them fit."""

    code = "context_budget_exceeded"
    message = "The items that must be included do not fit the token budget."
