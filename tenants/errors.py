"""Failures of tenancy, members and keys, each with a stable code (AppError: core/errors.py)."""

from __future__ import annotations

from core.errors import AppError


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


class LastAdminRemoval(LastAdmin):
    message = "This is the tenant's last admin: make someone else an admin first."


class InvitationInvalid(AppError):
    code = "invitation_invalid"
    status = 410
    message = "This invitation link is not valid."


class InvitationNotOpen(AppError):
    code = "invitation_not_open"
    status = 409
    message = "This invitation was already accepted or revoked."


class AlreadyInvited(AppError):
    code = "already_invited"
    status = 409
    message = "This address already has an open invitation: send it again instead."


class AlreadyMember(AppError):
    code = "already_member"
    status = 409
    message = "Someone with this address is already a member."


class InvitationForAnotherAddress(AppError):
    code = "invitation_other_address"
    status = 403
    message = "This invitation was sent to another address than your account's."


class AccountExists(AppError):
    code = "account_exists"
    status = 409
    message = "An account with this address exists: sign in to accept the invitation."


class UsernameTaken(AppError):
    code = "username_taken"
    message = "This username is taken: choose another."


class EmailNotSent(AppError):
    code = "email_not_sent"
    status = 503
    message = "The email could not be sent, so nothing was saved. Try again in a moment."
