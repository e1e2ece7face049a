"""Login protection: repeated wrong passwords lock out one username from one address."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tenants.client_ip import client_ip
from tenants.models import AuditEvent, Role
from tenants.scope import tenant_scope
from tests import factories, processes

WRONG = "not the password"
MESSAGE = "Too many failed sign-in attempts."


def browser(address: str = "10.0.0.1") -> Client:
    return Client(REMOTE_ADDR=address)


def log_in(client: Client, username: str, password: str, url: str = "/login/"):
    return client.post(url, {"username": username, "password": password})


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail_until_locked(client: Client, username: str, url: str = "/login/") -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, username, WRONG, url)


@pytest.fixture
def alice(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


def test_the_limit_comes_from_the_settings_and_keys_on_username_and_address_together():
    assert settings.AXES_FAILURE_LIMIT >= 3
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]
    assert timedelta(0) < settings.AXES_COOLOFF_TIME


def test_wrong_passwords_below_the_limit_show_the_usual_error_and_the_right_one_works(alice):
    client = browser()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = log_in(client, alice.user.username, WRONG)
        assert response.status_code == 200 and MESSAGE not in response.content.decode()
    response = log_in(client, alice.user.username, factories.PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_after_the_limit_the_right_password_is_refused_too(alice):
    client = browser()
    fail_until_locked(client, alice.user.username)
    response = log_in(client, alice.user.username, factories.PASSWORD)
    assert response.status_code == 429
    assert not logged_in(client)
    html = response.content.decode()
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert (
        f"Too many failed sign-in attempts. Try again in {minutes} minutes or ask an admin to"
        " unlock your account." in html
    )
    assert int(response["Retry-After"]) == minutes * 60


def test_the_lockout_page_has_the_console_look_without_inline_style_or_script(alice):
    client = browser()
    fail_until_locked(client, alice.user.username)
    response = log_in(client, alice.user.username, factories.PASSWORD)
    html = response.content.decode()
    assert 'href="/static/css/app.css"' in html and "<main" in html
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    assert "Content-Security-Policy" in response.headers


def test_another_address_with_the_same_username_still_logs_in(alice):
    fail_until_locked(browser("10.0.0.1"), alice.user.username)
    office = browser("10.0.0.2")
    response = log_in(office, alice.user.username, factories.PASSWORD)
    assert response.status_code == 302 and logged_in(office)


def test_another_username_from_the_same_address_still_logs_in(alice, tenant_a):
    bob = factories.make_member(tenant_a, Role.MEMBER)
    client = browser()
    fail_until_locked(client, alice.user.username)
    response = log_in(client, bob.user.username, factories.PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_lockout_ends_after_the_cool_off(alice):
    client = browser()
    fail_until_locked(client, alice.user.username)
    AccessAttempt.objects.filter(username=alice.user.username).update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )
    response = log_in(client, alice.user.username, factories.PASSWORD)
    assert response.status_code == 302 and logged_in(client)


def test_the_django_admin_login_locks_out_too(db):
    staff = factories.make_user()
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client = browser()
    fail_until_locked(client, staff.username, "/django-admin/login/")
    response = log_in(client, staff.username, factories.PASSWORD, "/django-admin/login/")
    assert response.status_code == 429 and MESSAGE in response.content.decode()
    assert not logged_in(client)


@pytest.mark.django_db(transaction=True)
def test_failed_attempts_are_committed_although_the_login_page_answers_with_an_error(
    tenant_a, alice
):
    client = browser()
    fail_until_locked(client, alice.user.username)
    log_in(client, alice.user.username, factories.PASSWORD)
    # Another connection sees only what the requests committed.
    with psycopg.connect(processes.test_database_url()) as other:
        row = other.execute(
            "SELECT sum(failures_since_start) FROM axes_accessattempt"
            " WHERE username = %s AND ip_address = '10.0.0.1'",
            [alice.user.username],
        ).fetchone()
    assert row[0] >= settings.AXES_FAILURE_LIMIT + 1


# --- admins unlock --------------------------------------------------------------------------------


def test_the_members_page_marks_a_locked_member_and_offers_to_unlock(client_for, members, alice):
    fail_until_locked(browser(), alice.user.username)
    html = client_for("admin").get("/admin/members/").content.decode()
    row = html.split(f'id="member-{alice.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "Locked out" in row and f"/admin/members/{alice.pk}/unlock/" in row
    other = html.split(f'id="member-{members[Role.VIEWER].pk}"', 1)[1].split("</tr>", 1)[0]
    assert "Locked out" not in other and "unlock" not in other


def test_an_admin_unlocks_a_member_who_then_logs_in_and_it_is_audited(
    client_for, members, alice, tenant_a
):
    client = browser()
    fail_until_locked(client, alice.user.username)
    response = client_for("admin").post(
        f"/admin/members/{alice.pk}/unlock/", HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    row = response.content.decode()
    assert f'id="member-{alice.pk}"' in row and "Locked out" not in row
    assert not AccessAttempt.objects.filter(username=alice.user.username).exists()
    response = log_in(client, alice.user.username, factories.PASSWORD)
    assert response.status_code == 302 and logged_in(client)
    with tenant_scope(tenant_a.pk):
        event = AuditEvent.objects.for_tenant(tenant_a).get(action="membership.unlocked")
    assert event.actor_user == members[Role.ADMIN].user
    assert event.target_id == str(alice.pk)
    assert event.after["user"] == alice.user.username
    assert event.after["attempts_cleared"] >= 1


def test_unlocking_clears_only_that_persons_attempts(client_for, alice, tenant_a):
    bob = factories.make_member(tenant_a, Role.MEMBER)
    fail_until_locked(browser(), alice.user.username)
    fail_until_locked(browser(), bob.user.username)
    client_for("admin").post(f"/admin/members/{alice.pk}/unlock/")
    assert AccessAttempt.objects.filter(username=bob.user.username).exists()


@pytest.mark.parametrize(
    "who,status", [("manager", 403), ("member", 403), ("viewer", 403), ("outsider", 404)]
)
def test_only_an_admin_of_the_tenant_may_unlock(client_for, alice, who, status):
    fail_until_locked(browser(), alice.user.username)
    response = client_for(who).post(f"/admin/members/{alice.pk}/unlock/")
    assert response.status_code == status
    assert AccessAttempt.objects.filter(username=alice.user.username).exists()


def test_unlocking_needs_a_post(client_for, alice):
    assert client_for("admin").get(f"/admin/members/{alice.pk}/unlock/").status_code == 405


# --- the client's address -------------------------------------------------------------------------


class FakeRequest:
    def __init__(self, **meta: str) -> None:
        self.META = meta


def test_the_address_is_remote_addr_and_forwarded_headers_are_ignored_by_default(settings):
    settings.TRUSTED_PROXY_COUNT = 0
    request = FakeRequest(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert client_ip(request) == "10.0.0.9"


def test_behind_trusted_proxies_the_address_is_the_one_the_outermost_proxy_saw(settings):
    settings.TRUSTED_PROXY_COUNT = 2
    # The client forged the first entry; the two proxies appended what they really saw.
    request = FakeRequest(
        REMOTE_ADDR="10.0.0.3", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7, 10.0.0.2"
    )
    assert client_ip(request) == "203.0.113.7"


@pytest.mark.parametrize("forwarded", ["", "10.0.0.2", "not-an-address, 10.0.0.2"])
def test_a_short_or_malformed_forwarded_header_falls_back_to_remote_addr(settings, forwarded):
    settings.TRUSTED_PROXY_COUNT = 2
    request = FakeRequest(REMOTE_ADDR="10.0.0.3", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == "10.0.0.3"


@pytest.mark.parametrize("path", ["/login/", "/django-admin/login/"])
@pytest.mark.parametrize("username", ["x" * 5000, "é" * 300])
def test_an_overlong_username_is_a_form_error_never_a_500(db, path, username):
    client = Client()
    for _ in range(7):  # past the lockout limit: nothing is recorded for it either
        response = client.post(path, {"username": username, "password": "p" * 5000})
        assert response.status_code == 200
        assert b"150 characters" in response.content or b"at most" in response.content
