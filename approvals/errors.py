"""Failures of the approvals app, each with a stable code."""

from __future__ import annotations

from typing import Any

from core.errors import AppError


class AlreadyDecided(AppError):
    code = "approval_already_decided"
    status = 409
    message = "This request was already decided."


class RequestChanged(AppError):
    code = "approval_changed"
    status = 409
    message = "This request changed while you were looking at it (escalated); review it again."


class InvalidDecision(AppError):
    code = "invalid_decision"
    message = "The decision must be 'approve' or 'reject'."


class NotAnApprover(AppError):
    """The principal may decide approvals in general, but not this one (policy rules)."""

    code = "not_an_approver"
    status = 403
    message = "You may not decide this request."


class InvalidArguments(AppError):
    """Edited arguments that fail the tool's JSON schema: 400, and nothing is decided."""

    code = "invalid"
    message = "Some fields are invalid."

    def __init__(self, problems: dict[str, list[str]]) -> None:
        super().__init__()
        self.problems = problems

    def as_dict(self) -> dict[str, Any]:
        # The API's usual shape for field errors, so clients parse one format.
        return {**super().as_dict(), "fields": {"arguments": self.problems}}


class GroupInUse(AppError):
    code = "approver_group_in_use"
    status = 409
    message = "This group is still used by a policy or a pending request."
