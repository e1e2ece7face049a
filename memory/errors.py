"""Failures of the memory app, each with a stable code."""

from __future__ import annotations

from core.errors import AppError


class EmptyText(AppError):
    code = "empty_text"
    message = "A fact needs some text."


class TextTooLong(AppError):
    code = "text_too_long"
    message = "A fact is at most 1,000 characters."


class UnknownCategory(AppError):
    code = "unknown_category"
    message = "Unknown memory category."


class InvalidKey(AppError):
    code = "invalid_key"
    message = "A key is up to 100 letters, digits, dots, dashes or underscores."


class SecretRefused(AppError):
    code = "secret_refused"
    status = 422
    message = "This looks like a secret or a credential, which is never remembered."


class CategoryNotWritable(AppError):
    code = "category_not_writable"
    status = 403
    message = "Agents may not remember facts of this category."


class FactSuperseded(AppError):
    code = "fact_superseded"
    status = 409
    message = "This fact has been replaced by a newer version; edit that one instead."


class SupportAccessOff(AppError):
    code = "support_access_off"
    status = 403
    message = "Support access to members' memories is off for this tenant."


class InvalidPolicy(AppError):
    code = "invalid_policy"
    message = "The memory policy is invalid."


class PrivacyLinkInvalid(AppError):
    code = "privacy_link_invalid"
    status = 410
    message = "This privacy link has expired or was already used."


class InvalidValue(AppError):
    code = "invalid_value"
    message = "A fact's value is a JSON object."


class TextAndValue(AppError):
    code = "text_and_value"
    message = "A fact has either a text or a value (a JSON object), not both."


class ValueTooLarge(AppError):
    code = "value_too_large"
    status = 413
    message = "A fact's value is too large."


class InvalidTtl(AppError):
    code = "invalid_ttl"
    message = "A TTL is a number of minutes above 0 and at most 100 years."
