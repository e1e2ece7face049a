"""The nav badge: how many pending requests the signed-in person may decide."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from approvals.selectors import BADGE_MOST, decidable_count
from tenants.models import Scope


def approvals_badge(request: HttpRequest) -> dict[str, Any]:
    """`approvals_badge` for people who approve; counted only if a template shows it."""
    principal = getattr(request, "principal", None)
    if principal is None or not principal.can(Scope.APPROVE):
        return {}
    return {
        "approvals_badge": SimpleLazyObject(lambda: decidable_count(principal, at_most=BADGE_MOST))
    }
