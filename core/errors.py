"""Failures with a stable code and a human message (`AppError`, which every app's errors
subclass), and the requests the shared plumbing refuses (unusable input, bodies too large,
misused Idempotency-Keys)."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """A failure with a stable code and a human message: every app's errors subclass it, and
    the API, the pages and the sockets answer it the same way."""

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


class BadInput(AppError, ValueError):
    """Input that cannot be used as given. A ValueError too, so that code parsing optional
    input (cursors, websocket messages) treats it like any other unreadable value."""

    code = "malformed_request"
    status = 400
    message = "The request body is not valid JSON."

    def __init__(
        self,
        message: str | None = None,
        *,
        fields: dict[str, list[str]] | None = None,
        reason: str = "",
        syntax: Any = None,
    ) -> None:
        super().__init__(message)
        self.fields = fields
        self.reason = reason  # the parser's words, for pages that phrase the message themselves
        # Where JSON text stops being JSON, for a person (core.json_input.SyntaxProblem).
        self.syntax = syntax

    def as_dict(self) -> dict[str, Any]:
        body = super().as_dict()
        if self.fields:
            body["fields"] = self.fields
        return body


class InvalidCharacters(BadInput):
    """A NUL character, a lone surrogate, or bytes that are not UTF-8: PostgreSQL can store
    none of them in text or jsonb."""

    code = "invalid_characters"
    message = "The request contains characters that are not allowed."


class TooDeep(BadInput):
    code = "too_deep"
    message = "The JSON is nested too deeply."


class PayloadTooLarge(AppError):
    code = "payload_too_large"
    status = 413
    message = "The request body is larger than allowed."


class IdempotencyKeyInvalid(AppError):
    code = "idempotency_key_invalid"
    message = "Idempotency-Key must be 1 to 255 printable characters."


class IdempotencyKeyReused(AppError):
    code = "idempotency_key_reused"
    status = 422
    message = "This Idempotency-Key was used with a different request."


class IdempotencyKeyInFlight(AppError):
    code = "idempotency_key_in_flight"
    status = 409
    message = "A request with this Idempotency-Key is still being processed."
