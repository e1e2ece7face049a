"""Invitations: an admin invites an email address with a role; a one-time link makes its
owner a member.

The link carries a signed token naming the tenant and a random nonce; only a SHA-256 of the
token is stored, so the database never holds a working link. Sending again puts a new token in
place (the old link stops working) and restarts the expiry. Opening the link (GET) spends
nothing, so mail scanners cannot use it up; accepting (POST) claims it with one conditional
UPDATE, so it works once.

A link never takes over an account: when an account with the invited address exists, its
owner signs in (with its password, or single sign-on) and accepts while signed in, and a
signed-in person accepts only an invitation sent to their own account's address.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import smtplib
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from tenants import errors
from tenants.audit import audit_record
from tenants.models import Invitation, Membership, Role, Tenant
from tenants.principal import Principal
from tenants.scope import system_scope, tenant_scope
from tenants.services import membership_join

logger = logging.getLogger(__name__)

SALT = "tenants.invitation"


@dataclass(frozen=True)
class Accepted:
    invitation: Invitation
    membership: Membership
    joined: bool  # False: the person was a member already (their role is kept)


def normalize_email(email: str) -> str:
    return email.strip().lower()


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _mint(tenant_id: Any) -> str:
    return signing.dumps({"t": str(tenant_id), "n": secrets.token_urlsafe(24)}, salt=SALT)


def _expiry() -> Any:
    return timezone.now() + timedelta(days=settings.INVITATION_MAX_AGE_DAYS)


def invitation_url(token: str) -> str:
    base = str(settings.AGENTSTATE_CONSOLE_URL).rstrip("/")
    return base + reverse("tenants:invitation_accept", args=[token])


# --- the admin's side -----------------------------------------------------------------------------


@transaction.atomic
def invitation_create(*, actor: Principal, email: str, role: str) -> Invitation:
    """Invite `email` as `role` and email the link; nothing is saved if it cannot be sent."""
    email = normalize_email(email)
    if role not in Role.values:
        raise errors.AppError(f"Role must be one of {', '.join(Role.values)}.")
    members = Membership.objects.for_tenant(actor.tenant)
    if members.filter(user__email__iexact=email).exists():
        raise errors.AlreadyMember()
    token = _mint(actor.tenant.pk)
    now = timezone.now()
    try:
        with transaction.atomic():
            invitation = Invitation.objects.create(
                tenant=actor.tenant,
                email=email,
                role=role,
                token_hash=_hash(token),
                invited_by=actor.user,
                sent_at=now,
                expires_at=_expiry(),
            )
    except IntegrityError:  # the partial unique index: one open invitation per address
        raise errors.AlreadyInvited() from None
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="invitation.created",
        target=invitation,
        after={"email": email, "role": role, "expires_at": invitation.expires_at.isoformat()},
    )
    _send(invitation, token, actor)
    return invitation


@transaction.atomic
def invitation_resend(*, actor: Principal, invitation: Invitation) -> Invitation:
    """A new link (the one sent before stops working) and a new expiry, emailed again."""
    token = _mint(actor.tenant.pk)
    now, expires_at = timezone.now(), _expiry()
    updated = (
        Invitation.objects.for_tenant(actor.tenant)
        .filter(pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True)
        .update(token_hash=_hash(token), sent_at=now, expires_at=expires_at)
    )
    if not updated:
        raise errors.InvitationNotOpen()
    before = invitation.expires_at.isoformat()
    invitation.token_hash, invitation.sent_at, invitation.expires_at = _hash(token), now, expires_at
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="invitation.resent",
        target=invitation,
        before={"expires_at": before},
        after={"email": invitation.email, "expires_at": expires_at.isoformat()},
    )
    _send(invitation, token, actor)
    return invitation


@transaction.atomic
def invitation_revoke(*, actor: Principal, invitation: Invitation) -> Invitation:
    now = timezone.now()
    updated = (
        Invitation.objects.for_tenant(actor.tenant)
        .filter(pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True)
        .update(revoked_at=now)
    )
    if not updated:
        raise errors.InvitationNotOpen()
    invitation.revoked_at = now
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="invitation.revoked",
        target=invitation,
        before={"revoked_at": None},
        after={"email": invitation.email, "revoked_at": now.isoformat()},
    )
    return invitation


def _send(invitation: Invitation, token: str, actor: Principal) -> None:
    tenant: Tenant = actor.tenant
    who = actor.user.get_username() if actor.user is not None else f"An admin of {tenant.name}"
    # One line: a name with a line break would otherwise make the subject header invalid.
    subject = " ".join(f"You are invited to {tenant.name} on AgentState".split())
    role = Role(invitation.role).label.lower()
    body = "\n".join(
        [
            f"{who} invited you to join {tenant.name} on AgentState as {role}.",
            "",
            "Accept the invitation here (the link works once, until"
            f" {invitation.expires_at:%Y-%m-%d %H:%M} UTC):",
            invitation_url(token),
            "",
            "If you did not expect this email, ignore it: nothing happens unless the link is used.",
            "",
        ]
    )
    message = EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [invitation.email])
    try:
        message.send()
    except (OSError, smtplib.SMTPException):
        # Raised inside the service's transaction: the invitation is not saved, and the admin
        # is told to try again (a link nobody received would only wait to expire).
        logger.warning("invitation email to tenant %s failed", tenant.pk, exc_info=True)
        raise errors.EmailNotSent() from None


# --- the invitee's side ---------------------------------------------------------------------------


def invitation_find(token: str) -> Invitation:
    """The invitation a link names, whatever its state; InvitationInvalid if none."""
    try:
        data = signing.loads(token, salt=SALT)
        tenant_id = uuid.UUID(str(data["t"]))
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise errors.InvitationInvalid() from None
    # The token names its tenant, so even this lookup runs under that tenant's row security.
    with tenant_scope(tenant_id):
        found = (
            Invitation.objects.for_tenant(tenant_id)
            .select_related("tenant", "invited_by", "accepted_by")
            .filter(token_hash=_hash(token))
            .first()
        )
    if found is None:
        raise errors.InvitationInvalid(
            "This invitation link is not valid. If it was sent again, use the newest email."
        )
    return found


def invitation_check(invitation: Invitation) -> None:
    """InvitationInvalid, saying why, unless the invitation can still be accepted."""
    if invitation.revoked_at is not None:
        raise errors.InvitationInvalid("This invitation was withdrawn by an admin.")
    if invitation.accepted_at is not None:
        raise errors.InvitationInvalid("This invitation was already used.")
    if invitation.is_expired:
        raise errors.InvitationInvalid(
            "This invitation has expired. Ask the admin who invited you to send it again."
        )


def account_exists(email: str) -> bool:
    """Whether some account has this address (shown only to the holder of its invitation)."""
    return get_user_model().objects.filter(email__iexact=email).exists()


@transaction.atomic
def invitation_accept_new_account(*, token: str, username: str, password: str) -> Accepted:
    """Create the invitee's account with the invited address and make it a member."""
    invitation = invitation_find(token)
    invitation_check(invitation)
    if account_exists(invitation.email):
        raise errors.AccountExists()
    user_model = get_user_model()
    if user_model.objects.filter(username__iexact=username).exists():
        raise errors.UsernameTaken()
    try:
        with transaction.atomic():
            user = user_model.objects.create_user(
                username=username, password=password, email=invitation.email
            )
    except IntegrityError:  # taken meanwhile by a concurrent sign-up
        raise errors.UsernameTaken() from None
    return _accept(invitation, user)


@transaction.atomic
def invitation_accept_signed_in(*, token: str, user: Any) -> Accepted:
    """A signed-in person accepts an invitation sent to their own account's address."""
    invitation = invitation_find(token)
    invitation_check(invitation)
    if not user.email or normalize_email(user.email) != invitation.email:
        raise errors.InvitationForAnotherAddress()
    return _accept(invitation, user)


def invitations_accept_for_email(*, user: Any, email: str) -> list[Accepted]:
    """Accept every open, unexpired invitation of a verified address (single sign-on)."""
    email = normalize_email(email)
    with system_scope("sso_invitations"):
        waiting = list(
            Invitation.objects.select_related("tenant", "invited_by").filter(
                email=email,
                accepted_at__isnull=True,
                revoked_at__isnull=True,
                expires_at__gt=timezone.now(),
            )
        )
    accepted = []
    for invitation in waiting:
        try:
            accepted.append(_accept(invitation, user))
        except errors.InvitationInvalid:
            continue  # revoked or used meanwhile
    return accepted


def _accept(invitation: Invitation, user: Any) -> Accepted:
    """Claim the invitation once (a conditional UPDATE), then add the membership."""
    tenant = invitation.tenant
    with tenant_scope(tenant.pk, user_id=user.pk):
        now = timezone.now()
        claimed = (
            Invitation.objects.for_tenant(tenant)
            .filter(
                pk=invitation.pk,
                token_hash=invitation.token_hash,
                accepted_at__isnull=True,
                revoked_at__isnull=True,
                expires_at__gt=now,
            )
            .update(accepted_at=now, accepted_by=user)
        )
        if not claimed:  # used, revoked, replaced or expired since it was read
            raise errors.InvitationInvalid("This invitation can no longer be used.")
        invitation.accepted_at, invitation.accepted_by = now, user
        membership, joined = membership_join(
            tenant=tenant,
            user=user,
            role=invitation.role,
            actor=Principal.for_member(tenant=tenant, user=user, role=invitation.role),
            how={"invitation": str(invitation.pk)},
        )
        audit_record(
            tenant=tenant,
            actor=Principal.for_member(tenant=tenant, user=user, role=membership.role),
            action="invitation.accepted",
            target=invitation,
            after={"email": invitation.email, "user": user.get_username(), "joined": joined},
        )
    return Accepted(invitation=invitation, membership=membership, joined=joined)
