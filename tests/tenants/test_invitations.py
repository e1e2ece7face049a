"""Invitations: an admin invites an address with a role; its one-time link makes a member.

The link is signed, stored only as a hash, expires, works once, dies when it is sent again or
revoked, and never takes over an account that already has the address.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.test import Client
from django.utils import timezone

from tenants.auth import invitations
from tenants.models import AuditEvent, Invitation, Membership, Role
from tenants.scope import system_scope, tenant_scope
from tests import factories

NEW_PASSWORD = "a long and unusual passphrase 7"
HX = {"HTTP_HX_REQUEST": "true"}


class BrokenEmailBackend:
    """A mail server that is down."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError("no mail server")


@pytest.fixture
def admin(client_for):
    return client_for("admin")


def invite(client: Client, email: str = "new.person@example.com", role: str = "member"):
    return client.post("/admin/members/invite/", {"email": email, "role": role}, **HX)


def link_in(message) -> str:
    """The path of the invitation link in an email."""
    found = re.search(r"https?://[^/\s]+(/invitations/\S+/)", message.body)
    assert found, message.body
    return found.group(1)


def invited(admin: Client, mailoutbox, email: str = "new.person@example.com", role="member"):
    """Invite through the page; the link's path."""
    response = invite(admin, email, role)
    assert response.status_code == 200, response.content.decode()
    return link_in(mailoutbox[-1])


def open_invitations(tenant) -> list[Invitation]:
    with tenant_scope(tenant.pk):
        return list(Invitation.objects.for_tenant(tenant).filter(accepted_at__isnull=True))


def accept_as_new(link: str, username: str = "newperson", client: Client | None = None):
    client = client or Client()
    data = {"username": username, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    return client, client.post(link, data)


def membership_of(user, tenant) -> Membership | None:
    with tenant_scope(tenant.pk):
        return Membership.objects.for_tenant(tenant).filter(user=user).first()


# --- the admin invites ----------------------------------------------------------------------------


def test_an_admin_invites_an_address_and_it_gets_one_short_email_with_a_link(
    admin, mailoutbox, tenant_a, members
):
    response = invite(admin, "  New.Person@Example.com ", "manager")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Invitation sent to <strong>new.person@example.com</strong>" in html
    assert len(mailoutbox) == 1
    message = mailoutbox[0]
    assert message.to == ["new.person@example.com"]
    assert message.subject == f"You are invited to {tenant_a.name} on AgentState"
    assert members[Role.ADMIN].user.username in message.body and "as manager" in message.body
    assert "works once" in message.body and message.content_subtype == "plain"
    [invitation] = open_invitations(tenant_a)
    assert (invitation.email, invitation.role) == ("new.person@example.com", "manager")
    assert invitation.invited_by == members[Role.ADMIN].user


def test_only_a_hash_of_the_token_is_stored(admin, mailoutbox, tenant_a):
    link = invited(admin, mailoutbox)
    token = link.split("/")[2]
    [invitation] = open_invitations(tenant_a)
    stored = " ".join(str(getattr(invitation, f.attname)) for f in Invitation._meta.fields)
    assert token not in stored and len(invitation.token_hash) == 64


def test_the_link_expires_after_the_configured_days(admin, mailoutbox, tenant_a, settings):
    settings.INVITATION_MAX_AGE_DAYS = 3
    invited(admin, mailoutbox)
    [invitation] = open_invitations(tenant_a)
    left = invitation.expires_at - timezone.now()
    assert timedelta(days=3) - timedelta(minutes=1) < left <= timedelta(days=3)


def test_admins_see_pending_invitations_with_role_inviter_and_expiry(
    admin, mailoutbox, members, tenant_a
):
    invited(admin, mailoutbox, "viewer.to.be@example.com", "viewer")
    [invitation] = open_invitations(tenant_a)
    html = admin.get("/admin/members/").content.decode()
    row = html.split(f'id="invitation-{invitation.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "viewer.to.be@example.com" in row and ">Viewer<" in row
    assert members[Role.ADMIN].user.username in row
    assert invitation.expires_at.strftime("%Y-%m-%d") in row
    assert "Resend" in row and "Revoke" in row


@pytest.mark.parametrize(
    "email,role",
    [
        ("", "member"),
        ("not-an-email", "member"),
        ("a" * 300 + "@example.com", "member"),
        ("person@example.com", "root"),
        ("person@example.com", ""),
    ],
)
def test_bad_invite_input_is_an_inline_error_and_saves_nothing(
    admin, mailoutbox, tenant_a, email, role
):
    response = invite(admin, email, role)
    assert response.status_code == 400
    assert 'class="error"' in response.content.decode()
    assert not open_invitations(tenant_a) and not mailoutbox


def test_bad_invite_input_without_htmx_shows_the_whole_page_with_the_error(admin, tenant_a):
    response = admin.post("/admin/members/invite/", {"email": "nope", "role": "member"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "<h1>Admin</h1>" in html and 'id="email-error"' in html


def test_inviting_an_address_twice_says_to_send_it_again(admin, mailoutbox, tenant_a):
    invited(admin, mailoutbox, "twice@example.com")
    response = invite(admin, "TWICE@example.com")
    assert response.status_code == 409
    assert "already has an open invitation" in response.content.decode()
    assert len(open_invitations(tenant_a)) == 1 and len(mailoutbox) == 1


def test_inviting_someone_who_is_a_member_already_is_refused(admin, members, mailoutbox):
    user = members[Role.VIEWER].user
    get_user_model().objects.filter(pk=user.pk).update(email="viewer@example.com")
    response = invite(admin, "Viewer@example.com")
    assert response.status_code == 409
    assert "already a member" in response.content.decode() and not mailoutbox


def test_an_email_that_cannot_be_sent_saves_nothing_and_says_so(admin, tenant_a, settings):
    settings.EMAIL_BACKEND = f"{__name__}.BrokenEmailBackend"
    response = invite(admin)
    assert response.status_code == 400
    assert "could not be sent, so nothing was saved" in response.content.decode()
    assert not open_invitations(tenant_a)
    with tenant_scope(tenant_a.pk):
        assert not AuditEvent.objects.for_tenant(tenant_a).filter(action__startswith="invit")


# --- the invitee accepts --------------------------------------------------------------------------


def test_opening_the_link_shows_the_invitation_and_spends_nothing(admin, mailoutbox, tenant_a):
    link = invited(admin, mailoutbox, role="manager")
    for _ in range(2):  # a mail scanner, then the person
        response = Client().get(link)
        assert response.status_code == 200
    html = response.content.decode()
    assert f"Join {tenant_a.name}" in html and "as <strong>manager</strong>" in html
    assert "Create account and join" in html
    assert len(open_invitations(tenant_a)) == 1


def test_the_invitee_sets_a_password_and_becomes_a_member_with_the_invited_role(
    admin, mailoutbox, tenant_a
):
    link = invited(admin, mailoutbox, "Ann@Example.com", "manager")
    client, response = accept_as_new(link, "ann")
    assert response.status_code == 302 and response["Location"] == "/"
    user = get_user_model().objects.get(username="ann")
    assert user.email == "ann@example.com" and user.check_password(NEW_PASSWORD)
    assert membership_of(user, tenant_a).role == Role.MANAGER
    home = client.get("/")
    assert home.status_code == 200 and f"Welcome to {tenant_a.name}" in home.content.decode()
    assert home.context["principal"].tenant == tenant_a
    signed_in = Client().post("/login/", {"username": "ann", "password": NEW_PASSWORD})
    assert signed_in.status_code == 302


def test_a_link_works_once(admin, mailoutbox, tenant_a):
    link = invited(admin, mailoutbox)
    accept_as_new(link, "first")
    _, again = accept_as_new(link, "second")
    assert again.status_code == 410
    assert "already used" in again.content.decode()
    assert not get_user_model().objects.filter(username="second").exists()
    assert Client().get(link).status_code == 410


def test_an_expired_link_is_refused_and_creates_nothing(admin, mailoutbox, tenant_a):
    link = invited(admin, mailoutbox)
    with tenant_scope(tenant_a.pk):
        Invitation.objects.for_tenant(tenant_a).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    _, response = accept_as_new(link)
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert not get_user_model().objects.filter(username="newperson").exists()


def test_a_revoked_link_is_refused(admin, mailoutbox, tenant_a):
    link = invited(admin, mailoutbox)
    [invitation] = open_invitations(tenant_a)
    assert admin.post(f"/admin/invitations/{invitation.pk}/revoke/", **HX).status_code == 200
    _, response = accept_as_new(link)
    assert response.status_code == 410 and "withdrawn" in response.content.decode()
    assert not get_user_model().objects.filter(username="newperson").exists()


def test_sending_again_makes_a_new_link_and_the_old_one_stops_working(admin, mailoutbox, tenant_a):
    old = invited(admin, mailoutbox)
    [invitation] = open_invitations(tenant_a)
    response = admin.post(f"/admin/invitations/{invitation.pk}/resend/", **HX)
    assert response.status_code == 200 and "Sent again" in response.content.decode()
    new = link_in(mailoutbox[-1])
    assert new != old and len(mailoutbox) == 2
    assert Client().get(old).status_code == 410
    _, response = accept_as_new(new)
    assert response.status_code == 302


def test_sending_an_expired_invitation_again_gives_it_the_full_time(admin, mailoutbox, tenant_a):
    invited(admin, mailoutbox)
    with tenant_scope(tenant_a.pk):
        Invitation.objects.for_tenant(tenant_a).update(expires_at=timezone.now())
    [invitation] = open_invitations(tenant_a)
    admin.post(f"/admin/invitations/{invitation.pk}/resend/", **HX)
    [invitation] = open_invitations(tenant_a)
    assert invitation.expires_at > timezone.now() + timedelta(days=6)


@pytest.mark.parametrize("token", ["nonsense", "a" * 500, "eyJ0IjoiMSJ9:1abc:forged"])
def test_a_made_up_or_tampered_link_is_refused(db, token):
    response = Client().get(f"/invitations/{token}/")
    assert response.status_code == 410
    assert "not valid" in response.content.decode()
    assert Client().post(f"/invitations/{token}/", {"username": "x"}).status_code == 410


def test_a_link_only_ever_looks_in_the_tenant_it_was_signed_for(db, tenant_a, tenant_b):
    # A token signed for tenant A whose hash is stored in tenant B (which cannot happen, but
    # if it did): the lookup runs under tenant A's row security and finds nothing.
    token = signing.dumps({"t": str(tenant_a.pk), "n": "x"}, salt=invitations.SALT)
    row = factories.make_row(Invitation, tenant_b)
    with system_scope("test_setup"):
        Invitation.objects.filter(pk=row.pk).update(
            token_hash=invitations._hash(token), expires_at=timezone.now() + timedelta(days=1)
        )
    response = Client().get(f"/invitations/{token}/")
    assert response.status_code == 410


def test_a_taken_username_is_an_inline_error_and_the_link_still_works(
    admin, mailoutbox, tenant_a, members
):
    link = invited(admin, mailoutbox)
    taken = members[Role.VIEWER].user.username
    _, response = accept_as_new(link, taken.upper())
    assert response.status_code == 400
    assert 'id="username-error"' in response.content.decode()
    assert "taken" in response.content.decode()
    assert len(open_invitations(tenant_a)) == 1


@pytest.mark.parametrize(
    "data,field",
    [
        ({"username": "bob", "password1": "short", "password2": "short"}, "password1"),
        ({"username": "bob", "password1": "12345678901", "password2": "12345678901"}, "password1"),
        ({"username": "bob", "password1": NEW_PASSWORD, "password2": "other"}, "password2"),
        (
            {"username": "bob smith!", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
            "username",
        ),  # noqa: E501
        ({"username": "b" * 151, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}, "username"),
        ({"username": "", "password1": "", "password2": ""}, "username"),
    ],
)
def test_bad_account_input_is_an_inline_error_and_creates_nothing(
    admin, mailoutbox, tenant_a, data, field
):
    link = invited(admin, mailoutbox)
    response = Client().post(link, data)
    assert response.status_code == 400
    assert f'id="{field}-error"' in response.content.decode()
    assert len(open_invitations(tenant_a)) == 1
    assert get_user_model().objects.filter(email="new.person@example.com").count() == 0


# --- existing accounts ----------------------------------------------------------------------------


@pytest.fixture
def existing(db):
    user = factories.make_user("existing")
    user.email = "existing@example.com"
    user.save()
    return user


def test_an_existing_account_cannot_be_taken_over_by_the_link(
    admin, mailoutbox, tenant_a, existing
):
    link = invited(admin, mailoutbox, "Existing@example.com", "admin")
    page = Client().get(link)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Sign in to accept" in html and "Create account" not in html
    _, response = accept_as_new(link, "intruder")
    assert response.status_code == 409
    assert not get_user_model().objects.filter(username="intruder").exists()
    existing.refresh_from_db()
    assert existing.check_password(factories.PASSWORD)
    assert membership_of(existing, tenant_a) is None
    assert len(open_invitations(tenant_a)) == 1


def test_an_existing_account_accepts_after_signing_in_with_its_password(
    admin, mailoutbox, tenant_a, existing
):
    link = invited(admin, mailoutbox, "existing@example.com", "viewer")
    html = Client().get(link).content.decode()
    assert f'href="/login/?next={link.replace(":", "%3A")}"' in html
    client = Client()
    response = client.post(
        f"/login/?next={link}",
        {"username": "existing", "password": factories.PASSWORD, "next": link},
    )
    assert response.status_code == 302 and response["Location"] == link
    assert "Join " + tenant_a.name in client.get(link).content.decode()
    response = client.post(link)
    assert response.status_code == 302
    assert membership_of(existing, tenant_a).role == Role.VIEWER
    assert client.get("/").context["principal"].tenant == tenant_a


def test_a_signed_in_person_cannot_accept_an_invitation_sent_to_another_address(
    admin, mailoutbox, tenant_a, existing
):
    link = invited(admin, mailoutbox, "someone.else@example.com")
    client = Client()
    client.force_login(existing)
    page = client.get(link)
    assert page.status_code == 200 and "not the invited one" in page.content.decode()
    assert client.post(link).status_code == 403
    assert membership_of(existing, tenant_a) is None
    assert len(open_invitations(tenant_a)) == 1


def test_a_member_of_the_tenant_accepting_keeps_their_role(
    admin, mailoutbox, tenant_a, members, existing
):
    link = invited(admin, mailoutbox, "existing@example.com", "admin")
    factories.make_member(tenant_a, Role.VIEWER, user=existing)
    client = Client()
    client.force_login(existing)
    assert client.post(link).status_code == 302
    assert membership_of(existing, tenant_a).role == Role.VIEWER


# --- audit, roles, isolation ----------------------------------------------------------------------


def test_invitations_and_their_acceptance_are_audited(admin, mailoutbox, tenant_a, members):
    invited(admin, mailoutbox, role="manager")
    [invitation] = open_invitations(tenant_a)
    admin.post(f"/admin/invitations/{invitation.pk}/resend/", **HX)
    accept_as_new(link_in(mailoutbox[-1]), "ann")
    with tenant_scope(tenant_a.pk):
        events = list(
            AuditEvent.objects.for_tenant(tenant_a)
            .filter(action__in=["invitation.created", "invitation.resent", "invitation.accepted"])
            .order_by("id")
        )
        added = AuditEvent.objects.for_tenant(tenant_a).get(
            action="membership.added", after__user="ann"
        )
    assert [e.action for e in events] == [
        "invitation.created",
        "invitation.resent",
        "invitation.accepted",
    ]
    admin_name = members[Role.ADMIN].user.username
    assert [e.actor_label for e in events] == [admin_name, admin_name, "ann"]
    assert events[0].after["role"] == "manager" and events[0].target_id == str(invitation.pk)
    assert added.after["role"] == "manager"


def test_revoking_is_confirmed_first_then_audited(admin, mailoutbox, tenant_a):
    invited(admin, mailoutbox)
    [invitation] = open_invitations(tenant_a)
    url = f"/admin/invitations/{invitation.pk}/revoke/"
    confirm = admin.get(url, **HX)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "Its link stops working" in html and "Revoke invitation" in html
    assert len(open_invitations(tenant_a)) == 1  # asking changed nothing
    assert "Revoke invitation" in admin.get(url).content.decode()  # a page without htmx
    done = admin.post(url, **HX)
    assert done.status_code == 200 and "was revoked" in done.content.decode()
    assert admin.post(url, **HX).status_code == 404  # no longer pending
    with tenant_scope(tenant_a.pk):
        assert AuditEvent.objects.for_tenant(tenant_a).filter(action="invitation.revoked").count()


WEB_ACTS = [
    ("post", "/admin/members/invite/", {"email": "x@example.com", "role": "member"}),
    ("post", "/admin/invitations/{inv}/resend/", {}),
    ("get", "/admin/invitations/{inv}/revoke/", {}),
    ("post", "/admin/invitations/{inv}/revoke/", {}),
    ("get", "/admin/invitations/{inv}/", {}),
]


@pytest.fixture
def pending(admin, mailoutbox, tenant_a):
    invited(admin, mailoutbox, "pending@example.com")
    [invitation] = open_invitations(tenant_a)
    return invitation


@pytest.mark.parametrize("who", ["manager", "member", "viewer", "outsider", "anonymous"])
@pytest.mark.parametrize("method,url,data", WEB_ACTS)
def test_only_admins_manage_invitations_and_outsiders_get_404(
    client_for, pending, tenant_a, mailoutbox, who, method, url, data
):
    sent = len(mailoutbox)
    response = getattr(client_for(who), method)(url.format(inv=pending.pk), data, **HX)
    if who == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    elif who == "outsider" and "{inv}" in url:
        assert response.status_code == 404
    elif who == "outsider":
        assert response.status_code == 200  # invites into its own tenant only
    else:
        assert response.status_code == 403
    [still] = open_invitations(tenant_a)
    assert still.token_hash == pending.token_hash and still.revoked_at is None
    assert len(mailoutbox) == sent + (1 if who == "outsider" and "{inv}" not in url else 0)


def test_the_outsider_never_sees_tenant_a_invitations(client_for, pending):
    html = client_for("outsider").get("/admin/members/").content.decode()
    assert "pending@example.com" not in html
    assert (
        "pending@example.com"
        not in client_for("outsider").get("/api/v1/invitations").content.decode()
    )


# --- the API --------------------------------------------------------------------------------------


def api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_an_admin_key_invites_lists_resends_and_revokes(tenant_a, mailoutbox):
    key = factories.make_api_key(tenant_a, ["admin", "read"]).raw
    created = api(key).post(
        "/api/v1/invitations",
        {"email": "Api@Example.com", "role": "viewer"},
        content_type="application/json",
    )
    assert created.status_code == 201
    body = created.json()
    assert body["email"] == "api@example.com" and body["role"] == "viewer"
    assert "token" not in body and "/invitations/" not in created.content.decode()
    assert len(mailoutbox) == 1
    listed = api(key).get("/api/v1/invitations").json()
    assert [i["id"] for i in listed] == [body["id"]]
    resent = api(key).post(f"/api/v1/invitations/{body['id']}/resend")
    assert resent.status_code == 200 and len(mailoutbox) == 2
    revoked = api(key).post(f"/api/v1/invitations/{body['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert api(key).post(f"/api/v1/invitations/{body['id']}/revoke").status_code == 404


@pytest.mark.parametrize(
    "body",
    [{}, {"email": "nope", "role": "member"}, {"email": "a@example.com", "role": "root"}],
)
def test_bad_api_input_is_400_naming_the_fields(tenant_a, mailoutbox, body):
    key = factories.make_api_key(tenant_a, ["admin"]).raw
    response = api(key).post("/api/v1/invitations", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert not mailoutbox


def test_inviting_twice_through_the_api_is_409_already_invited(tenant_a, mailoutbox):
    key = factories.make_api_key(tenant_a, ["admin"]).raw
    data = {"email": "twice@example.com", "role": "member"}
    api(key).post("/api/v1/invitations", data, content_type="application/json")
    again = api(key).post("/api/v1/invitations", data, content_type="application/json")
    assert again.status_code == 409 and again.json()["code"] == "already_invited"


@pytest.mark.parametrize("scopes", [["read"], ["read", "write", "approve"]])
def test_keys_without_the_admin_scope_cannot_invite(tenant_a, scopes):
    key = factories.make_api_key(tenant_a, scopes).raw
    data = {"email": "x@example.com", "role": "member"}
    response = api(key).post("/api/v1/invitations", data, content_type="application/json")
    assert response.status_code == 403
    assert api(key).get("/api/v1/invitations").status_code == 403


def test_another_tenants_invitation_is_404_through_the_api(pending, tenant_b):
    key = factories.make_api_key(tenant_b, ["admin"]).raw
    assert api(key).post(f"/api/v1/invitations/{pending.pk}/revoke").status_code == 404
    assert api(key).post(f"/api/v1/invitations/{pending.pk}/resend").status_code == 404
