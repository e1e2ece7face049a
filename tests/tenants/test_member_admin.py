"""Admins change roles and remove members; never the last admin; every change audited."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import AuditEvent, Membership, Role
from tenants.scope import tenant_scope
from tests import factories

HX = {"HTTP_HX_REQUEST": "true"}


def audit(tenant, action: str) -> list[AuditEvent]:
    with tenant_scope(tenant.pk):
        return list(AuditEvent.objects.for_tenant(tenant).filter(action=action).order_by("id"))


def role_of(membership) -> str | None:
    with tenant_scope(membership.tenant_id):
        found = Membership.objects.for_tenant(membership.tenant_id).filter(pk=membership.pk)
        return found.values_list("role", flat=True).first()


@pytest.fixture
def admin(client_for):
    return client_for("admin")


def test_role_changes_are_audited_with_before_and_after(admin, members, tenant_a):
    viewer = members[Role.VIEWER]
    response = admin.post(f"/admin/members/{viewer.pk}/role/", {"role": "manager"}, **HX)
    assert response.status_code == 200
    assert role_of(viewer) == Role.MANAGER
    [event] = audit(tenant_a, "membership.role_changed")
    assert event.actor_user == members[Role.ADMIN].user
    assert event.before == {"role": "viewer"}
    assert event.after == {"role": "manager", "user": viewer.user.username}


def test_an_unknown_role_is_an_inline_error_and_changes_nothing(admin, members, tenant_a):
    viewer = members[Role.VIEWER]
    response = admin.post(f"/admin/members/{viewer.pk}/role/", {"role": "owner"}, **HX)
    assert response.status_code == 400
    html = response.content.decode()
    assert f'id="role-error-{viewer.pk}"' in html and 'aria-invalid="true"' in html
    assert role_of(viewer) == Role.VIEWER and not audit(tenant_a, "membership.role_changed")


def test_a_role_change_without_javascript_redirects_back_with_a_message(admin, members):
    viewer = members[Role.VIEWER]
    response = admin.post(f"/admin/members/{viewer.pk}/role/", {"role": "member"}, follow=True)
    assert response.redirect_chain[-1][0] == "/admin/members/"
    assert f"{viewer.user.username} is now member." in response.content.decode()


def test_the_last_admin_cannot_be_demoted_with_a_stable_code_and_a_message(
    admin, members, tenant_a
):
    last = members[Role.ADMIN]
    response = admin.post(f"/admin/members/{last.pk}/role/", {"role": "viewer"}, **HX)
    assert response.status_code == 400
    assert "A tenant must keep at least one admin." in response.content.decode()
    assert role_of(last) == Role.ADMIN and not audit(tenant_a, "membership.role_changed")


def test_the_last_admin_cannot_be_removed_with_a_stable_code_and_a_message(
    admin, members, tenant_a
):
    last = members[Role.ADMIN]
    response = admin.post(f"/admin/members/{last.pk}/remove/", **HX)
    assert response.status_code == 409
    assert "last admin: make someone else an admin first" in response.content.decode()
    assert role_of(last) == Role.ADMIN and not audit(tenant_a, "membership.removed")


def test_the_api_refuses_to_remove_the_last_admin_with_409_last_admin(tenant_a):
    key = factories.make_api_key(tenant_a, ["admin"])  # its maker is the one admin
    with tenant_scope(tenant_a.pk):
        [last] = Membership.objects.for_tenant(tenant_a).filter(role=Role.ADMIN)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}").delete(f"/api/v1/members/{last.pk}")
    assert response.status_code == 409
    assert response.json() == {
        "code": "last_admin",
        "message": "This is the tenant's last admin: make someone else an admin first.",
    }


def test_removal_is_confirmed_first_then_removes_and_is_audited(admin, members, tenant_a):
    member = members[Role.MEMBER]
    url = f"/admin/members/{member.pk}/remove/"
    confirm = admin.get(url, **HX)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert f"Remove {member.user.username} from {tenant_a.name}?" in html
    assert f"Remove {member.user.username}</button>" in html and "Cancel" in html
    assert "hx-confirm" not in html and role_of(member) == Role.MEMBER  # asking changed nothing
    cancel = admin.get(f"/admin/members/{member.pk}/", **HX)
    assert cancel.status_code == 200 and "Remove" in cancel.content.decode()
    done = admin.post(url, **HX)
    assert done.status_code == 200
    assert f"{member.user.username} was removed" in done.content.decode()
    assert role_of(member) is None
    [event] = audit(tenant_a, "membership.removed")
    assert event.before == {"user": member.user.username, "role": "member"}
    assert event.actor_user == members[Role.ADMIN].user
    assert event.target_id == str(member.pk)


def test_without_javascript_removal_confirms_on_a_page_and_redirects(admin, members):
    member = members[Role.MEMBER]
    page = admin.get(f"/admin/members/{member.pk}/remove/")
    assert page.status_code == 200 and "<h1>Admin</h1>" in page.content.decode()
    response = admin.post(f"/admin/members/{member.pk}/remove/", follow=True)
    assert f"{member.user.username} was removed." in response.content.decode()


def test_a_removed_member_loses_access_at_once(admin, members, client_for):
    manager = members[Role.MANAGER]
    theirs = client_for("manager")
    assert theirs.get("/runs/").status_code == 200
    admin.post(f"/admin/members/{manager.pk}/remove/", **HX)
    response = theirs.get("/runs/")
    assert response.status_code == 403  # signed in, but a member of no tenant


def test_an_admin_may_remove_another_admin_while_one_remains(admin, members, tenant_a):
    second = factories.make_member(tenant_a, Role.ADMIN)
    assert admin.post(f"/admin/members/{second.pk}/remove/", **HX).status_code == 200
    assert role_of(second) is None


def test_removing_a_member_twice_is_404_the_second_time(admin, members):
    member = members[Role.MEMBER]
    admin.post(f"/admin/members/{member.pk}/remove/", **HX)
    assert admin.post(f"/admin/members/{member.pk}/remove/", **HX).status_code == 404


ACTS = [
    ("get", "/admin/members/{m}/remove/", {}),
    ("post", "/admin/members/{m}/remove/", {}),
    ("post", "/admin/members/{m}/role/", {"role": "admin"}),
    ("get", "/admin/members/{m}/", {}),
]


@pytest.mark.parametrize("who", ["manager", "member", "viewer", "outsider"])
@pytest.mark.parametrize("method,url,data", ACTS)
def test_only_admins_change_members_and_outsiders_get_404(
    client_for, members, who, method, url, data
):
    target = members[Role.VIEWER]
    response = getattr(client_for(who), method)(url.format(m=target.pk), data, **HX)
    assert response.status_code == (404 if who == "outsider" else 403)
    assert role_of(target) == Role.VIEWER


@pytest.mark.parametrize("who", ["manager", "member", "viewer", "outsider"])
def test_only_admin_keys_remove_members_through_the_api(client_for, members, who):
    target = members[Role.VIEWER]
    response = client_for(who).delete(f"/api/v1/members/{target.pk}")
    assert response.status_code == (404 if who == "outsider" else 403)
    assert role_of(target) == Role.VIEWER


def test_an_admin_removes_a_member_through_the_api(client_for, members, tenant_a):
    target = members[Role.VIEWER]
    response = client_for("admin").delete(f"/api/v1/members/{target.pk}")
    assert response.status_code == 204
    assert role_of(target) is None and audit(tenant_a, "membership.removed")


def test_the_members_page_lists_emails_and_marks_you(admin, members):
    me = members[Role.ADMIN]
    html = admin.get("/admin/members/").content.decode()
    row = html.split(f'id="member-{me.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "(you)" in row
    other = html.split(f'id="member-{members[Role.VIEWER].pk}"', 1)[1].split("</tr>", 1)[0]
    assert "(you)" not in other and "/remove/" in other


@pytest.mark.django_db(transaction=True)
def test_two_admins_removing_each_other_at_once_leave_one_admin():
    import threading

    from django.db import connection

    from tenants import errors, services
    from tenants.scope import tenant_scope

    tenant = factories.make_tenant()
    first = factories.make_member(tenant, Role.ADMIN)
    second = factories.make_member(tenant, Role.ADMIN)
    locked, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def remove(actor, target, hold: bool) -> None:
        try:
            with tenant_scope(tenant.pk):
                services.membership_remove(actor=factories.principal_for(actor), membership=target)
                if hold:  # keep the transaction (and its row locks) open a while
                    locked.set()
                    release.wait(10)
            outcome[target.user.username] = "removed"
        except errors.LastAdmin as exc:
            outcome[target.user.username] = exc.code
        finally:
            connection.close()

    one = threading.Thread(target=remove, args=(first, second, True))
    one.start()
    assert locked.wait(10)
    two = threading.Thread(target=remove, args=(second, first, False))
    two.start()
    two.join(0.5)
    assert two.is_alive()  # waits for the first removal's locks
    release.set()
    one.join(10)
    two.join(10)
    assert outcome == {second.user.username: "removed", first.user.username: "last_admin"}
    with tenant_scope(tenant.pk):
        admins = Membership.objects.for_tenant(tenant).filter(role=Role.ADMIN)
        assert list(admins.values_list("pk", flat=True)) == [first.pk]
