"""Failures with a stable code and a human message. Other apps subclass `AppError`."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    code = "error"
    status = 400
    message = "The request could not be completed."

    def __init__(self, message: str | None = None, *, detail: Any = None) -> None:
        self.message = message or self.message
        self.detail = detail
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body


class NotFound(AppError):
    code = "not_found"
    status = 404
    message = "Not found."


class PermissionDenied(AppError):
    code = "permission_denied"
    status = 403
    message = "Your role does not allow this."


class InvalidScopes(AppError):
    code = "invalid_scopes"
    message = "Unknown API key scopes."


class InvalidExpiry(AppError):
    code = "invalid_expiry"
    message = "An API key expires in 1 to 3650 days, or never."


class ApiKeyAlreadyRevoked(AppError):
    code = "api_key_revoked"
    status = 409
    message = "This API key is already revoked."


class LastAdmin(AppError):
    code = "last_admin"
    status = 409
    message = "A tenant must keep at least one admin."
