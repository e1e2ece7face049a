"""Pages for people who are not signed in yet: an invitation link, and password reset."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from core.errors import AppError
from tenants.auth import backends, invitations
from tenants.auth.passwords import reset_wait_seconds
from tenants.client_ip import client_ip
from tenants.errors import UsernameTaken
from tenants.forms import AcceptInvitationForm
from tenants.middleware import SESSION_TENANT_KEY
from tenants.models import Invitation
from tenants.tasks import send_password_reset

ACCEPT = "registration/invitation_accept.html"
INVALID = "registration/invitation_invalid.html"


@never_cache
@require_http_methods(["GET", "POST"])
def invitation_accept(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows what the link offers and spends nothing; POST accepts it.

    Signed in, a person accepts an invitation sent to their own account's address. Not
    signed in, they create an account, unless one has the invited address: then they sign in
    first (the link never stands in for an account's password).
    """
    try:
        invitation = invitations.invitation_find(token)
    except AppError as exc:
        return _invalid(request, exc)
    user = request.user
    if user.is_authenticated and invitation.accepted_by_id == user.pk:
        # A single sign-on on the way here accepted it already.
        return _enter(request, invitation, joined=True)
    try:
        invitations.invitation_check(invitation)
    except AppError as exc:
        return _invalid(request, exc)
    if user.is_authenticated:
        return _signed_in(request, token, invitation)
    if invitations.account_exists(invitation.email):
        status = 409 if request.method == "POST" else 200
        return _page(request, invitation, "sign_in", status=status)
    return _new_account(request, token, invitation)


def _signed_in(request: HttpRequest, token: str, invitation: Invitation) -> HttpResponse:
    email = request.user.email
    if not email or invitations.normalize_email(email) != invitation.email:
        status = 403 if request.method == "POST" else 200
        return _page(request, invitation, "other_account", status=status)
    if request.method == "GET":
        return _page(request, invitation, "join")
    try:
        accepted = invitations.invitation_accept_signed_in(token=token, user=request.user)
    except AppError as exc:
        return _invalid(request, exc)
    return _enter(request, accepted.invitation, joined=accepted.joined)


def _new_account(request: HttpRequest, token: str, invitation: Invitation) -> HttpResponse:
    form = AcceptInvitationForm(request.POST or None, email=invitation.email)
    if request.method == "POST" and form.is_valid():
        try:
            accepted = invitations.invitation_accept_new_account(
                token=token,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
            )
        except UsernameTaken as exc:
            form.add_error("username", exc.message)
        except AppError as exc:
            return _invalid(request, exc)
        else:
            login(
                request,
                accepted.membership.user,
                backend=backends.PATH,
            )
            return _enter(request, accepted.invitation, joined=True)
    status = 400 if request.method == "POST" else 200
    return _page(request, invitation, "new_account", form=form, status=status)


def _page(
    request: HttpRequest, invitation: Invitation, mode: str, status: int = 200, **extra
) -> HttpResponse:
    context = {"invitation": invitation, "mode": mode, **extra}
    return render(request, ACCEPT, context, status=status)


def _invalid(request: HttpRequest, exc: AppError) -> HttpResponse:
    return render(request, INVALID, {"error": exc.message}, status=exc.status)


def _enter(request: HttpRequest, invitation: Invitation, *, joined: bool) -> HttpResponse:
    request.session[SESSION_TENANT_KEY] = str(invitation.tenant_id)
    name = invitation.tenant.name
    messages.success(
        request, f"Welcome to {name}." if joined else f"You were a member of {name} already."
    )
    return redirect("tenants:home")


class PasswordResetView(auth_views.PasswordResetView):
    """The request page: counts the request, queues the email, answers the same to everyone."""

    success_url = reverse_lazy("tenants:password_reset_done")

    def form_valid(self, form) -> HttpResponse:
        email = form.cleaned_data["email"]
        wait = reset_wait_seconds(email=email, address=client_ip(self.request))
        if wait is not None:
            context = {"minutes": max(1, round(wait / 60))}
            response = render(
                self.request, "registration/password_reset_limited.html", context, status=429
            )
            response["Retry-After"] = str(int(wait))
            return response
        # Looked up and sent by the task: the answer takes as long whether or not an account
        # has the address. Queued when the request commits.
        transaction.on_commit(lambda: send_password_reset.delay(email=email))
        return redirect(self.success_url)

    def form_invalid(self, form) -> HttpResponse:
        return self.render_to_response(self.get_context_data(form=form), status=400)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    def get_context_data(self, **kwargs):
        return super().get_context_data(minutes=settings.PASSWORD_RESET_TIMEOUT // 60, **kwargs)
