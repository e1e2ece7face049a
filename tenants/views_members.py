"""The members page: members and their roles, invitations, removal, sign-in unlocks.

With htmx each action swaps one row (or the invitation panel); a destructive action first
swaps in its confirmation (GET), whose button POSTs. Without JavaScript every form posts to
the same URLs and the answer is a redirect back to the page with a message.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import AppError
from tenants import selectors, services
from tenants.auth import invitations
from tenants.forms import InviteForm, RoleForm
from tenants.models import Invitation, Membership, Role, Scope
from tenants.permissions import require_scope

MEMBERS = "tenants/members.html"
CONFIRM = "tenants/confirm.html"


def _back(request: HttpRequest, *, ok: str = "", error: str = "") -> HttpResponse:
    """Browsers without htmx: back to the page, saying what happened."""
    if error:
        messages.error(request, error)
    elif ok:
        messages.success(request, ok)
    return redirect("tenants:members")


@require_GET
@require_scope(Scope.ADMIN)
def members(request: HttpRequest) -> HttpResponse:
    return _page(request, InviteForm())


def _page(request: HttpRequest, form: InviteForm, status: int = 200) -> HttpResponse:
    tenant = request.principal.tenant
    rows = list(selectors.members_for_tenant(tenant=tenant))
    locked = selectors.locked_out_usernames(tenant=tenant)
    for m in rows:
        m.locked_out = m.user.username in locked
    context = {"members": rows, **_panel(request, form)}
    return render(request, MEMBERS, context, status=status)


def _panel(request: HttpRequest, form: InviteForm, **extra: Any) -> dict[str, Any]:
    return {
        "invite_form": form,
        "invitations": selectors.open_invitations_for_tenant(tenant=request.principal.tenant),
        "roles": Role.choices,
        "max_age_days": settings.INVITATION_MAX_AGE_DAYS,
        **extra,
    }


# --- invitations ----------------------------------------------------------------------------------


@require_POST
@require_scope(Scope.ADMIN)
def member_invite(request: HttpRequest) -> HttpResponse:
    """Invite by email; the answer is the invitation panel, errors inline in its form."""
    form = InviteForm(request.POST)
    sent, status = None, 400
    if form.is_valid():
        try:
            sent = invitations.invitation_create(actor=request.principal, **form.cleaned_data)
        except AppError as exc:
            # A failed email is no fault of the address: shown above the form, not under it.
            form.add_error(None if exc.code == "email_not_sent" else "email", exc.message)
            status = 409 if exc.status == 409 else 400  # both swapped in by htmx
    if sent is not None:
        if not request.htmx:
            return _back(request, ok=f"Invitation sent to {sent.email}.")
        context = _panel(request, InviteForm(), sent=sent)
        return render(request, MEMBERS + "#invitations-panel", context)
    if not request.htmx:
        return _page(request, form, status=status)
    return render(request, MEMBERS + "#invitations-panel", _panel(request, form), status=status)


def _invitation(request: HttpRequest, invitation_id: Any) -> Invitation:
    return get_object_or_404(
        selectors.open_invitations_for_tenant(tenant=request.principal.tenant), pk=invitation_id
    )


def _invitation_row(
    request: HttpRequest, invitation: Invitation, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {"inv": invitation, **extra}
    return render(request, MEMBERS + "#invitation-row", context, status=status)


@require_GET
@require_scope(Scope.ADMIN)
def invitation_row(request: HttpRequest, invitation_id: Any) -> HttpResponse:
    """One pending invitation's row: what "Cancel" in a confirmation puts back."""
    invitation = _invitation(request, invitation_id)
    if not request.htmx:
        return redirect("tenants:members")
    return _invitation_row(request, invitation)


@require_POST
@require_scope(Scope.ADMIN)
def invitation_resend(request: HttpRequest, invitation_id: Any) -> HttpResponse:
    invitation = _invitation(request, invitation_id)
    try:
        invitations.invitation_resend(actor=request.principal, invitation=invitation)
    except AppError as exc:
        if not request.htmx:
            return _back(request, error=exc.message)
        return _invitation_row(request, invitation, status=409, error=exc.message)
    if not request.htmx:
        return _back(request, ok=f"Invitation sent again to {invitation.email}.")
    return _invitation_row(request, invitation, notice="Sent again with a new link.")


@require_http_methods(["GET", "POST"])
@require_scope(Scope.ADMIN)
def invitation_revoke(request: HttpRequest, invitation_id: Any) -> HttpResponse:
    """GET: the confirmation (the row, with htmx; else a page). POST: revoke."""
    invitation = _invitation(request, invitation_id)
    if request.method == "GET":
        if request.htmx:
            return _invitation_row(request, invitation, confirm=True)
        return render(request, CONFIRM, {"inv": invitation})
    try:
        invitations.invitation_revoke(actor=request.principal, invitation=invitation)
    except AppError as exc:
        if not request.htmx:
            return _back(request, error=exc.message)
        return _invitation_row(request, invitation, status=409, error=exc.message)
    if not request.htmx:
        return _back(request, ok=f"The invitation to {invitation.email} was revoked.")
    return _invitation_row(request, invitation, revoked=True)


# --- members --------------------------------------------------------------------------------------


def _membership(request: HttpRequest, membership_id: int) -> Membership:
    return get_object_or_404(
        selectors.members_for_tenant(tenant=request.principal.tenant), pk=membership_id
    )


def _member_row(
    request: HttpRequest, membership: Membership, status: int = 200, **extra: Any
) -> HttpResponse:
    locked = selectors.locked_out_usernames(tenant=request.principal.tenant)
    membership.locked_out = membership.user.username in locked  # type: ignore[attr-defined]
    context = {"m": membership, "roles": Role.choices, **extra}
    return render(request, MEMBERS + "#member-row", context, status=status)


@require_GET
@require_scope(Scope.ADMIN)
def member_row(request: HttpRequest, membership_id: int) -> HttpResponse:
    """One member's row: what "Cancel" in a confirmation puts back."""
    membership = _membership(request, membership_id)
    if not request.htmx:
        return redirect("tenants:members")
    return _member_row(request, membership)


@require_POST
@require_scope(Scope.ADMIN)
def member_unlock(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _membership(request, membership_id)
    services.member_unlock(actor=request.principal, membership=membership)
    if not request.htmx:
        return _back(request, ok=f"{membership.user.username} may sign in again.")
    return _member_row(request, membership)


@require_POST
@require_scope(Scope.ADMIN)
def member_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _membership(request, membership_id)
    form = RoleForm(request.POST)
    error = None
    if not form.is_valid():
        error = "Choose one of the listed roles."
    else:
        try:
            services.membership_set_role(
                actor=request.principal, membership=membership, role=form.cleaned_data["role"]
            )
        except AppError as exc:
            error = exc.message
            membership.refresh_from_db()
    if not request.htmx:
        ok = f"{membership.user.username} is now {membership.get_role_display().lower()}."
        return _back(request, ok=ok, error=error or "")
    return _member_row(request, membership, status=400 if error else 200, error=error)


@require_http_methods(["GET", "POST"])
@require_scope(Scope.ADMIN)
def member_remove(request: HttpRequest, membership_id: int) -> HttpResponse:
    """GET: the confirmation (the row, with htmx; else a page). POST: remove."""
    membership = _membership(request, membership_id)
    if request.method == "GET":
        if request.htmx:
            return _member_row(request, membership, confirm=True)
        return render(request, CONFIRM, {"m": membership})
    try:
        services.membership_remove(actor=request.principal, membership=membership)
    except AppError as exc:
        if not request.htmx:
            return _back(request, error=exc.message)
        return _member_row(request, membership, status=exc.status, remove_error=exc.message)
    if not request.htmx:
        return _back(request, ok=f"{membership.user.username} was removed.")
    return _member_row(request, membership, removed=True)
