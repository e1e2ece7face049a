"""Signed, expiring, one-time links a tenant's own app hands its end user to open the
privacy page without a password.

A link signs (tenant, user, nonce). Opening it (GET) shows a confirmation and spends nothing,
so a mail scanner that follows every link cannot use it up; the person's POST redeems it and
records the nonce, so a second redemption fails. The session it opens reaches only the privacy
page (`tenants.middleware.SESSION_PRIVACY_ONLY_KEY`). Links are made for, and redeemed by, plain
end users only: people whose one and only membership is a member role in this tenant (never
staff, never someone of another tenant), checked again when the link is redeemed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse

from memory.errors import PrivacyLinkInvalid
from memory.models import PrivacyLinkUse
from tenants.audit import audit_record
from tenants.errors import NotFound
from tenants.models import Membership, Role, Tenant
from tenants.principal import Principal
from tenants.scope import system_scope, tenant_scope

SALT = "memory.privacy-link"


@dataclass(frozen=True)
class LinkHolder:
    """The end user a valid link opens the privacy page of."""

    user: Any
    tenant: Tenant
    nonce: str


def link_make(*, tenant_id: Any, subject_id: int) -> tuple[str, int]:
    """A relative URL of a fresh link for this end user, and how many seconds it lasts."""
    if _end_user(tenant_id, subject_id) is None:
        raise NotFound("No end user with this id.")
    token = signing.dumps(
        {"t": str(tenant_id), "s": subject_id, "n": secrets.token_urlsafe(16)}, salt=SALT
    )
    return reverse("memory:memory_link", args=[token]), settings.MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS


def link_check(token: str) -> LinkHolder:
    """Whose page a valid, unused link opens; the link stays unused. Else PrivacyLinkInvalid."""
    data = _load(token)
    with tenant_scope(data["t"]):
        membership = _end_user(data["t"], data["s"])
        if membership is None or not membership.user.is_active:
            raise PrivacyLinkInvalid("This privacy link is no longer valid.")
        if PrivacyLinkUse.objects.for_tenant(data["t"]).filter(nonce=data["n"]).exists():
            raise _used()
        return LinkHolder(user=membership.user, tenant=membership.tenant, nonce=data["n"])


@transaction.atomic
def link_redeem(token: str) -> LinkHolder:
    """Use the link up, audited as its person; the caller then logs them in."""
    holder = link_check(token)
    with tenant_scope(holder.tenant.pk, user_id=holder.user.pk):
        try:
            with transaction.atomic():
                PrivacyLinkUse.objects.create(
                    tenant=holder.tenant, subject=holder.user, nonce=holder.nonce
                )
        except IntegrityError:  # redeemed meanwhile by a concurrent request
            raise _used() from None
        audit_record(
            tenant=holder.tenant,
            actor=Principal.for_member(tenant=holder.tenant, user=holder.user, role=Role.MEMBER),
            action="memory.privacy_link_redeemed",
            target_type="auth.user",
            target_id=str(holder.user.pk),
        )
    return holder


def _load(token: str) -> dict[str, Any]:
    try:
        data = signing.loads(token, salt=SALT, max_age=settings.MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise PrivacyLinkInvalid("This privacy link has expired. Ask for a new one.") from None
    except signing.BadSignature:
        raise PrivacyLinkInvalid("This privacy link is not valid.") from None
    return data


def _used() -> PrivacyLinkInvalid:
    return PrivacyLinkInvalid("This privacy link was already used. Ask for a new one.")


def _end_user(tenant_id: Any, subject_id: Any) -> Membership | None:
    """The person's member role in this tenant, if it is their one and only membership."""
    membership = (
        Membership.objects.for_tenant(tenant_id)
        .select_related("user", "tenant")
        .filter(user_id=subject_id, role=Role.MEMBER)
        .first()
    )
    if membership is None:
        return None
    with system_scope("privacy_link_check"):
        sole = Membership.objects.filter(user_id=subject_id).count() == 1
    return membership if sole else None
