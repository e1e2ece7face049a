"""Data minimisation: text that looks like a secret or a credential is never remembered.

Patterns err on the side of refusing: a refused fact costs a little recall, a stored card
number costs a breach. Each pattern has a name that the refusal reports (never the match).
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # API keys and tokens of well-known shapes, then any long opaque token after "key"/"token".
    (
        "api_key",
        re.compile(
            r"\b(?:sk|pk|rk)[-_](?:live|test|proj)?[-_]?[A-Za-z0-9]{16,}"
            r"|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{20,}|\bxox[abpr]-[A-Za-z0-9-]{10,}"
            r"|\bAIza[0-9A-Za-z_-]{30,}|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."
        ),
    ),
    (
        "api_key",
        re.compile(
            r"\b(?:api[ _-]?key|secret|token|bearer)\b\W{0,3}(?:is\W{0,3})?[A-Za-z0-9_\-]{16,}",
            re.I,
        ),
    ),
    (
        "password",
        re.compile(r"\b(?:password|passwd|passcode|pwd|pin)\b\W{0,3}(?:is\W{0,3})?\S{3,}", re.I),
    ),
    ("private_key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    # National ids: US SSN, UK NI number, IBAN.
    ("national_id", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")),
    ("national_id", re.compile(r"\b[A-CEGHJ-PR-TW-Z]{2}\s?\d{2}\s?\d{2}\s?\d{2}\s?[A-D]\b")),
    ("bank_account", re.compile(r"\b[A-Z]{2}\d{2}(?:\s?[A-Z0-9]{4}){3,7}(?:\s?[A-Z0-9]{1,3})?\b")),
]
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){13,19}(?!\d)")


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def secret_kind(text: str) -> str | None:
    """The kind of secret `text` seems to hold (card_number, api_key, ...), or None."""
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _luhn(digits):
            return "card_number"
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return None
