"""Signed, expiring, one-time links a tenant's own app hands its end user to open the
privacy page without a password.

A link signs (tenant, user, nonce); opening it records the nonce, so a second open fails.
It logs the user in, so links are only made for plain end users: people whose one and only
membership is a member role in this tenant (never staff, never someone of another tenant).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse

from memory.errors import PrivacyLinkInvalid
from memory.models import PrivacyLinkUse
from tenants.context import tenant_context
from tenants.errors import NotFound
from tenants.models import Membership, Role

SALT = "memory.privacy-link"


def link_make(*, tenant_id: Any, subject_id: int) -> tuple[str, int]:
    """A relative URL of a fresh link for this end user, and how many seconds it lasts."""
    member = Membership.objects.for_tenant(tenant_id).filter(user_id=subject_id, role=Role.MEMBER)
    if not member.exists() or not _sole_membership(subject_id):
        raise NotFound("No end user with this id.")
    token = signing.dumps(
        {"t": str(tenant_id), "s": subject_id, "n": secrets.token_urlsafe(16)}, salt=SALT
    )
    return reverse("memory_link", args=[token]), settings.MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS


def _sole_membership(subject_id: int) -> bool:
    from tenants.context import system_context

    with system_context("privacy_link_check"):
        return Membership.objects.filter(user_id=subject_id).count() == 1


def redeem(token: str) -> tuple[Any, str]:
    """The user and tenant of a valid, unused link (now used), or PrivacyLinkInvalid."""
    try:
        data = signing.loads(token, salt=SALT, max_age=settings.MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise PrivacyLinkInvalid("This privacy link has expired. Ask for a new one.") from None
    except signing.BadSignature:
        raise PrivacyLinkInvalid("This privacy link is not valid.") from None
    tenant_id, subject_id = data["t"], data["s"]
    with tenant_context(tenant_id):
        if not Membership.objects.for_tenant(tenant_id).filter(user_id=subject_id).exists():
            raise PrivacyLinkInvalid("This privacy link is no longer valid.")
        try:
            with transaction.atomic():
                PrivacyLinkUse.objects.create(
                    tenant_id=tenant_id, subject_id=subject_id, nonce=data["n"]
                )
        except IntegrityError:
            raise PrivacyLinkInvalid(
                "This privacy link was already used. Ask for a new one."
            ) from None
    return get_user_model().objects.get(pk=subject_id), tenant_id
